"""One real vLLM (CPU build, from the venv rollwire manages) serving the tiny model for a whole test session.

Where vLLM is not installed the tests that need it skip with the reason, except under
``ROLLWIRE_REQUIRE_VLLM=1`` (CI, whose ``.ci/run`` installs it), where they fail.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from rollwire.app.stack import free_port
from rollwire.app.vllm_runtime import installed_python, serve_command, serve_env
from rollwire.settings import Settings
from tests.polling import wait_until

REQUIRE_ENV = "ROLLWIRE_REQUIRE_VLLM"
MAX_MODEL_LEN = 32768
START_TIMEOUT_S = 900.0


def _tail(log: Path) -> str:
    return " | ".join(log.read_text(errors="replace").splitlines()[-15:])


@contextmanager
def serve_vllm(model_dir: Path, log_dir: Path, max_model_len: int = MAX_MODEL_LEN) -> Iterator[str]:
    """Start vLLM on a free loopback port, yield its URL once /health answers, stop it (and its workers) after."""
    python = installed_python(Settings().home)  # where `rollwire vllm install` put it
    if python is None:
        reason = "vLLM's CPU build is not installed (`rollwire vllm install`)"
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{reason}, and {REQUIRE_ENV} is set")
        pytest.skip(reason)
    port = free_port()
    argv = serve_command(python, model=str(model_dir), host="127.0.0.1", port=port,
                         served_model_name=model_dir.name, max_model_len=max_model_len)  # fmt: skip
    log = log_dir / "vllm.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=serve_env(), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def healthy() -> bool:
            if process.poll() is not None:
                pytest.fail(f"vLLM exited with status {process.returncode}: {_tail(log)}")
            try:
                return httpx.get(f"{url}/health", timeout=2.0).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            wait_until(healthy, "vLLM to answer /health", timeout_s=START_TIMEOUT_S, every_s=0.5)
        except AssertionError as exc:
            pytest.fail(f"{exc}: {_tail(log)}")
        yield url
    finally:
        # its own process group: the API server and its engine-core worker go together
        with contextlib.suppress(ProcessLookupError):  # gone already: it failed to start
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
