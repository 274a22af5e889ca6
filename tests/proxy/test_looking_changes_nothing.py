"""Looking at a store changes nothing in it: ``rollwire traces ui`` (the viewer served on its own, as a real child
process), ``traces ls``, ``show`` and ``export`` open it read-only. The store's bytes, its rows and its schema
are what they were; a store of an older schema is refused in one line rather than migrated."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from rollwire.app.cli.__main__ import main
from rollwire.app.serving import ServerThread
from rollwire.proxy.app import create_app
from rollwire.settings import ProxySettings
from rollwire.store.versions import SCHEMA_VERSION
from tests.proxy.conftest import admin_client
from tests.sampling import SAMPLE_SEED

KEY = "looking-key"


def _fingerprint(store: Path) -> dict[str, str]:
    """The store file's digest and every file beside it with its size (SQLite's own -wal/-shm included)."""
    beside = {p.name: str(p.stat().st_size) for p in sorted(store.parent.iterdir()) if p.name != store.name}
    return {"store": hashlib.sha256(store.read_bytes()).hexdigest(), **beside}


def _rows(store: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        return {table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in ("run", "rollout", "modelcall")}


@pytest.fixture()
def recorded(engine_url: str, served_model: str, tiny_model_dir: Path, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A store one proxy wrote (a rollout of two calls, finished), then closed: nobody writes to it after."""
    store = tmp_path / "store" / "store.db"
    settings = ProxySettings(upstream=engine_url, model=str(tiny_model_dir), sample_seed=SAMPLE_SEED)
    with ServerThread(create_app(settings, f"sqlite:///{store}", tmp_path, operator_key=KEY)) as proxy:
        admin = admin_client(proxy.urls["admin"], KEY)
        run = admin.post("/admin/v1/runs", json={}).json()["id"]
        rollout = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": 1}).json()[0]
        client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
        for _ in range(2):
            out = client.chat.completions.create(model=served_model, messages=messages, max_tokens=6)
            messages += [{"role": "assistant", "content": out.choices[0].message.content or ""},
                         {"role": "user", "content": "more"}]  # fmt: skip
        admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json={"reward": 1.0}).raise_for_status()
        admin.close()
    yield store, rollout["id"]


def _serve_viewer(store: Path, tiny_model_dir: Path, home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "ROLLWIRE_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("ROLLWIRE_PROXY__OPERATOR_KEY", None)
    argv = [sys.executable, "-m", "rollwire.app.cli", "traces", "ui", "--db", f"sqlite:///{store}", "--port", "0",
            "--model", str(tiny_model_dir)]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def test_the_viewer_and_the_traces_commands_leave_the_store_as_it_was(
    recorded: tuple[Path, str], tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, rollout_id = recorded
    before, rows = _fingerprint(store), _rows(store)
    process = _serve_viewer(store, tiny_model_dir, tmp_path / "home")
    try:
        assert process.stdout is not None
        head = process.stdout.readline()
        assert "read-only" in head, head
        url = process.stdout.readline().split("open ", 1)[1].strip()  # http://127.0.0.1:PORT/ui/?key=K
        with httpx.Client(timeout=60, follow_redirects=True) as browser:
            page = browser.get(url)  # logs in: the key becomes a cookie
            assert page.status_code == 200 and "<html" in page.text.lower()
            base = url.split("/ui/", 1)[0]
            runs = browser.get(f"{base}/ui/api/runs").json()
            assert [run["total"] for run in runs] == [1]
            tokens = browser.get(f"{base}/ui/api/rollouts/{rollout_id}/tokens").json()
            assert tokens["rollout_id"] == rollout_id and tokens["pieces"] and tokens["reward"] == 1.0
            assert httpx.get(f"{base}/ui/api/runs", timeout=30).status_code == 401  # no key, no data
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)
    # Ctrl-C: uvicorn's own shutdown (0), or the CLI's interrupt status (130) when it lands outside the server loop
    assert process.returncode in (0, 130), process.stdout.read() if process.stdout else ""
    url_arg = f"sqlite:///{store}"
    assert main(["traces", "ls", "--db", url_arg]) == 0
    assert main(["traces", "show", rollout_id, "--db", url_arg, "--model", str(tiny_model_dir)]) == 0
    assert main(["export", "--db", url_arg, "--flavor", "trajectory", "--out", str(tmp_path / "t.jsonl")]) == 0
    assert rollout_id in capsys.readouterr().out
    after = _fingerprint(store)
    assert after["store"] == before["store"] and _rows(store) == rows
    added = {name: size for name, size in after.items() if before.get(name) != size}
    assert set(added) <= {"store.db-wal", "store.db-shm"} and added.get("store.db-wal", "0") == "0", added


def test_an_older_store_is_refused_in_one_line_not_migrated(
    recorded: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, _ = recorded
    with sqlite3.connect(store) as db:
        db.execute("UPDATE rollwire_schema SET version = ?", (SCHEMA_VERSION - 1,))
    before = _fingerprint(store)
    assert main(["traces", "ls", "--db", f"sqlite:///{store}"]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "older than this rollwire's" in error and "migrates nothing" in error
    assert _fingerprint(store)["store"] == before["store"]
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        assert db.execute("SELECT version FROM rollwire_schema").fetchone()[0] == SCHEMA_VERSION - 1
