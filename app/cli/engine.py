"""Serve the bundled vLLM-compatible engine: /v1/completions (text or token-id prompts, logprobs,
return_token_ids, streaming), /tokenize, /detokenize, /v1/models, /health, plus /reload_weights and
/weight_version for hot weight reloads. Without --model it serves the tiny local default model.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rollwire.app.cli.listen_args import add_fd_argument
from rollwire.errors import InvalidRequest, NotFound
from rollwire.settings import EngineSettings, Settings

HELP = "serve the bundled vLLM-compatible engine (tiny local model by default)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    fields = EngineSettings.model_fields
    parser.add_argument("--host", default=None, help=f"{fields['host'].description} (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help=f"{fields['port'].description} (default 8100)")
    parser.add_argument("--model", default=None, metavar="NAME|FOLDER", help=fields["model"].description)
    parser.add_argument("--served-model-name", default=None, help=fields["served_model_name"].description)
    parser.add_argument("--max-batch-size", type=int, default=None, help=fields["max_batch_size"].description)
    parser.add_argument("--max-model-len", type=int, default=None, help=fields["max_model_len"].description)
    parser.add_argument("--device", default=None, help=fields["device"].description)
    parser.add_argument("--threads", type=int, default=None, help=f"{fields['threads'].description} (default 1)")
    parser.add_argument(
        "--prefix-cache-mib", type=int, default=None, metavar="MIB",
        help=f"{fields['prefix_cache_mib'].description} (default 1024)",
    )  # fmt: skip
    add_fd_argument(parser)


def _engine_settings(args: argparse.Namespace, settings: Settings) -> EngineSettings:
    """Flags beat env vars, which beat the defaults."""
    overrides = {
        name: getattr(args, name)
        for name in (
            "host",
            "port",
            "model",
            "served_model_name",
            "max_batch_size",
            "max_model_len",
            "device",
            "threads",
            "prefix_cache_mib",
        )
        if getattr(args, name) is not None
    }
    return settings.engine.model_copy(update=overrides)


def _check_model_dir(model: str) -> None:
    folder = Path(model).expanduser()
    if not folder.is_dir():
        raise NotFound(f"model folder {folder} does not exist")
    if not (folder / "config.json").is_file():
        raise InvalidRequest(f"{folder} is not a Hugging Face checkpoint folder (no config.json)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.model_names import resolve_model

    engine = _engine_settings(args, settings)
    if engine.model:  # a name is built (once) here; a folder must hold a checkpoint
        engine = engine.model_copy(update={"model": str(resolve_model(engine.model, settings.home))})
        _check_model_dir(engine.model)
    if engine.max_batch_size < 1:
        raise InvalidRequest("--max-batch-size must be at least 1")
    if engine.prefix_cache_mib < 0:
        raise InvalidRequest("--prefix-cache-mib must be 0 (off) or more")
    if engine.threads < 0:
        raise InvalidRequest("--threads must be 0 (torch's default) or more")
    import torch

    from rollwire.app.serving import listening_socket, serve
    from rollwire.engine.app import create_app

    if engine.threads:
        # One thread by default: on a small machine shared with the proxy, harnesses and trainer, more intra-op
        # threads than free cores make every decode step wait on preempted workers (bench/engine.py shows it).
        torch.set_num_threads(engine.threads)
    sock = listening_socket(engine.host, engine.port, args.fd)
    print(f"rollwire engine: loading, then serving on http://{engine.host}:{engine.port}", flush=True)
    return serve(create_app(engine, settings.home), sock, log_level="info")


__all__ = ["HELP", "add_arguments", "run"]
