"""``rollwire traces ls|show|export`` over a store the proxy wrote: show marks sampled tokens apart."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from rollwire.cli.__main__ import main
from tests.proxy.conftest import Proxy


def test_ls_show_export(
    proxy: Proxy, served_model: str, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rollout = proxy.new_rollout()
    body = {"model": served_model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
    assert httpx.post(f"{rollout['base_url']}/chat/completions", json=body, timeout=60).status_code == 200
    proxy.admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json={"reward": 1.0}).raise_for_status()
    capsys.readouterr()
    assert main(["traces", "--db", proxy.store_url, "ls"]) == 0
    assert rollout["id"] in capsys.readouterr().out
    assert main(["traces", "--db", proxy.store_url, "show", rollout["id"], "--model", str(tiny_model_dir)]) == 0
    shown = capsys.readouterr().out
    assert "<|im_start|>user\nhello" in shown and "<<" in shown and "sampled" in shown
    out = tmp_path / "t.jsonl"
    assert main(["traces", "--db", proxy.store_url, "export", "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [t["rollout_id"] for t in lines] == [rollout["id"]] and lines[0]["reward"] == 1.0


def test_missing_store_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["traces", "--db", f"sqlite:///{tmp_path / 'none.db'}", "ls"]) == 1
    assert "no trace store" in capsys.readouterr().err
