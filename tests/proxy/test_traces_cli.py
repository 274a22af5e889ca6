"""``rollwire traces ls|show|export`` over a store the proxy wrote: show marks sampled tokens apart; ``--db``
before or after the action; ``traces export`` is ``rollwire export --db``; without a store, ``ls`` points at
the demo runs' stores."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from rollwire.app.cli.__main__ import main
from tests.proxy.conftest import Proxy


def test_ls_show_export(
    proxy: Proxy, served_model: str, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rollout = proxy.new_rollout()
    body = {"model": served_model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
    assert httpx.post(f"{rollout['base_url']}/chat/completions", json=body, timeout=60).status_code == 200
    proxy.admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json={"reward": 1.0}).raise_for_status()
    capsys.readouterr()
    for argv in (["traces", "--db", proxy.store_url, "ls"], ["traces", "ls", "--db", proxy.store_url]):
        assert main(argv) == 0
        assert rollout["id"] in capsys.readouterr().out
    assert main(["traces", "show", rollout["id"], "--db", proxy.store_url, "--model", str(tiny_model_dir)]) == 0
    shown = capsys.readouterr().out
    assert "<|im_start|>user\nhello" in shown and "<<" in shown and "sampled" in shown
    aliased, direct = tmp_path / "t.jsonl", tmp_path / "direct.jsonl"
    assert main(["traces", "--db", proxy.store_url, "export", "--flavor", "trajectory", "--out", str(aliased)]) == 0
    assert main(["export", "--db", proxy.store_url, "--flavor", "trajectory", "--out", str(direct)]) == 0
    lines = [json.loads(line) for line in aliased.read_text().splitlines()]
    assert [t["rollout_id"] for t in lines] == [rollout["id"]] and lines[0]["reward"] == 1.0
    assert direct.read_text() == aliased.read_text()  # one export command under two names
    sft = tmp_path / "sft.jsonl"
    assert main(["traces", "export", "--db", proxy.store_url, "--out", str(sft)]) == 0
    (row,) = [json.loads(line) for line in sft.read_text().splitlines()]
    assert row["rollout_id"] == rollout["id"] and "input_ids" in row


def test_missing_store_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["traces", "--db", f"sqlite:///{tmp_path / 'none.db'}", "ls"]) == 1
    assert "no trace store" in capsys.readouterr().err
    assert main(["export", "--db", f"sqlite:///{tmp_path / 'none.db'}", "--out", str(tmp_path / "x.jsonl")]) == 1
    assert "no trace store" in capsys.readouterr().err
    both = ["export", "--db", "sqlite://", "--admin-url", "http://127.0.0.1:9", "--out", str(tmp_path / "x.jsonl")]
    assert main(both) == 1
    assert "give one source, not --db and --admin-url" in capsys.readouterr().err


def test_ls_without_a_store_lists_the_demo_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("ROLLWIRE_HOME", str(home))
    monkeypatch.delenv("ROLLWIRE_STORE__URL", raising=False)
    assert main(["traces", "ls"]) == 1
    assert "no trace store at" in capsys.readouterr().err
    for run in ("20260101-090000", "20260102-090000"):
        (home / "demo" / run).mkdir(parents=True)
        (home / "demo" / run / "store.db").write_bytes(b"")
    assert main(["traces", "ls"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "each demo run recorded into its own store" in out[0]
    newest_first = ("20260102-090000", "20260101-090000")
    assert out[1:] == [f"  rollwire traces ls --db sqlite:///{home}/demo/{run}/store.db" for run in newest_first]
    assert main(["traces", "show", "r-1"]) == 1
    assert f"--db sqlite:///{home}/demo/20260102-090000/store.db" in capsys.readouterr().err
