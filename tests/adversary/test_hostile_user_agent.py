"""Red team: a rollout's User-Agent is what the policy wrote. The proxy keeps it on each call (``ModelCall.client``)
printable and cut to ``CLIENT_CHARS``, and the audit's HTML page escapes it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from rollwire.app.cli.__main__ import main
from rollwire.clients import CLIENT_CHARS
from rollwire.store import ModelCall, open_engine, session_scope
from tests.proxy.conftest import Proxy, engine_url, proxy, served_model, start_proxy

__all__ = ["engine_url", "proxy", "served_model", "start_proxy"]  # the proxy's fixtures, used here


def test_a_hostile_user_agent_is_kept_bounded_and_escaped(
    proxy: Proxy, served_model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The User-Agent comes from inside a rollout: stored printable and cut, escaped on the audit's page."""
    rollout = proxy.new_rollout()
    agent = "<script>alert(1)</script>/6.6 ".encode() + "\u00e9".encode("latin-1") * 5000
    body = {"model": served_model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    headers = [(b"User-Agent", agent), (b"Authorization", b"Bearer x")]
    answered = httpx.post(f"{rollout['base_url']}/chat/completions", json=body, headers=headers, timeout=60)
    assert answered.status_code == 200, answered.text
    with session_scope(open_engine(proxy.store_url)) as session:
        (call,) = session.query(ModelCall).filter(ModelCall.rollout_id == rollout["id"]).all()
    assert len(call.client) == CLIENT_CHARS and call.client.endswith("?" * 10)
    capsys.readouterr()
    code = main(["audit", "--rollout", rollout["id"], "--html", str(tmp_path / "a.html"), "--db", proxy.store_url])
    page = (tmp_path / "a.html").read_text()
    assert code == 0 and "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
