"""`--log-format json`: a service's every stderr line is one JSON object (time, level, logger, message) carrying
the rollout and call ids where the code knows them; a bad format name is one readable line."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import openai

from rollwire.app.serving import ServerThread
from rollwire.settings import EngineSettings


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_proxy_logs_json_lines_with_rollout_and_call_ids(tiny_model_dir: Path, tmp_path: Path) -> None:
    from rollwire.engine import create_app

    engine_app = create_app(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path / "engine")
    with ServerThread(engine_app) as engine:
        cmd = [sys.executable, "-m", "rollwire.app.cli", "--log-level", "DEBUG", "proxy", "--log-format", "json",
               "--port", str(_port()), "--admin-port", str(_port()), "--upstream", engine.url,
               "--db", f"sqlite:///{tmp_path / 's.db'}", "--model", str(tiny_model_dir)]  # fmt: skip
        env = {**os.environ, "ROLLWIRE_HOME": str(tmp_path / "home"), "ROLLWIRE_PROXY__OPERATOR_KEY": "k"}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert proc.stdout is not None
            found = None
            for line in proc.stdout:  # the banner (stdout) names the ad-hoc rollout's base URL
                found = found or re.search(r"(http://\S+/r/\S+/v1) *$", line.strip())
                match = re.search(r"rollout (\S+)\): ", line)
                if match:
                    rollout_id = match.group(1)
                    break
            assert found is not None, f"no base URL (rc {proc.poll()})"
            client = openai.OpenAI(base_url=found.group(1), api_key="unused", max_retries=0)
            model = client.models.list().data[0].id
            answer = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
            assert answer.choices[0].message is not None
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line parses: one object per line
    assert records and all({"time", "level", "logger", "message"} <= set(r) for r in records)
    recorded = [r for r in records if r["message"].startswith("model call recorded")]
    assert len(recorded) == 1
    assert recorded[0]["rollout_id"] == rollout_id and isinstance(recorded[0]["call_id"], int)
    assert recorded[0]["dialect"] == "chat" and recorded[0]["logger"] == "rollwire.proxy.recorder"
    token = found.group(1).split("/r/")[1].split("/")[0]
    assert token not in err  # even at DEBUG no line prints a request's path (no access log): it holds the token


def test_unknown_log_format_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "ROLLWIRE_LOG_FORMAT": "xml", "ROLLWIRE_HOME": str(tmp_path)}
    argv = [sys.executable, "-m", "rollwire.app.cli", "proxy", "--model", str(tmp_path / "none")]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "rollwire: bad settings: unknown log format 'xml'; known: text, json"
    flag = subprocess.run([*argv[:3], "--log-format", "xml", *argv[3:]], capture_output=True, text=True,
                          env={**env, "ROLLWIRE_LOG_FORMAT": "json"}, timeout=60)  # fmt: skip
    assert flag.returncode == 2 and "invalid choice: 'xml'" in flag.stderr
