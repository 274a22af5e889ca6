"""The policy writes the history a harness sends back, and the proxy keeps each rollout's last messages parsed
(``rollwire.proxy.dialects.parsed``) and its last body's layout (``rollwire.proxy.resent_body``), so a rollout's
requests now reach state the proxy holds between calls.
Through the real proxy and the bundled engine, with Anthropic's own client:

- a history that is equal in Python but not in JSON (a tool call's ``1`` written back as ``true``, its keys
  reordered) is read as a fresh parse reads it: every recorded prompt equals the one a proxy without the memo
  records (``splice_policy=render`` re-renders each call whole, so what the memo hands back reaches the prompt);
- another rollout sending the same messages byte for byte is never read through the first rollout's memo.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from rollwire.app.serving import ServerThread
from rollwire.engine import create_app as create_engine
from rollwire.proxy.app import create_app as create_proxy
from rollwire.reconstruct import load_calls
from rollwire.settings import EngineSettings, ProxySettings
from rollwire.store import decode_ids, open_engine
from rollwire.store.prompts import whole_prompts

KEY = "test-operator-key"
WRITTEN_BACK = [{"n": 1, "path": "a"}, {"n": True, "path": "a"}, {"path": "a", "n": 1}, {"n": 1.0, "path": "a"}]
"""One tool call as the policy writes it back turn after turn: equal dicts in Python, four different JSON texts."""


@pytest.fixture(scope="module")
def engine_url(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = EngineSettings(model=str(tiny_model_dir), device="cpu")
    with ServerThread(create_engine(settings, tmp_path_factory.mktemp("engine"))) as server:
        yield server.url


def _history(turn: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "read the file"}]
    for i in range(turn + 1):
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "read", "input": WRITTEN_BACK[turn]}
        messages += [
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "ok"}]},
        ]
    return messages


def _run(engine_url: str, tiny_model_dir: Path, folder: Path, memo_bytes: int) -> tuple[list[list[int]], Any]:
    """The same two rollouts through a proxy whose memo holds ``memo_bytes``: their recorded prompts, and the memo."""
    settings = ProxySettings(
        upstream=engine_url, model=str(tiny_model_dir), splice_policy="render", cache_message_bytes=memo_bytes
    )
    store = f"sqlite:///{folder / 'proxy.db'}"
    app = create_proxy(settings, store, folder, operator_key=KEY)
    with ServerThread(app) as proxy:
        with httpx.Client(base_url=proxy.urls["admin"], headers={"Authorization": f"Bearer {KEY}"}) as admin:
            run = admin.post("/admin/v1/runs", json={}).json()["id"]
            rollouts = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": 2}).json()
        memo, bodies = app.state.proxy.parsed, app.state.proxy.bodies
        policy, other = (anthropic.Anthropic(base_url=r["anthropic_base_url"], api_key="x", max_retries=0) for r in rollouts)
        for turn in range(len(WRITTEN_BACK)):
            policy.messages.create(model="tiny", max_tokens=4, messages=_history(turn))  # type: ignore[arg-type]
        before, taken = memo.reused, bodies.reused
        other.messages.create(model="tiny", max_tokens=4, messages=_history(len(WRITTEN_BACK) - 1))  # type: ignore[arg-type]
        assert memo.reused == before, "another rollout's request was read through the policy's memo"
        assert bodies.reused == taken, "another rollout's body was read through the policy's"
        assert memo_bytes == 0 or taken > 0, "the body memo took part (the SDK writes compact JSON)"
    engine = open_engine(store)
    try:
        calls = load_calls(engine, rollouts[0]["id"])
        return [decode_ids(p) for p in whole_prompts(calls)], memo
    finally:
        engine.dispose()


def test_a_history_equal_in_python_but_not_in_json_reads_as_without_the_memo(
    engine_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    with_memo, memo = _run(engine_url, tiny_model_dir, tmp_path / "on", 1 << 20)
    without, _ = _run(engine_url, tiny_model_dir, tmp_path / "off", 0)
    assert memo.reused > 0, "the memo took part"
    assert len(with_memo) == len(WRITTEN_BACK) and with_memo == without
    assert len({tuple(p) for p in with_memo}) == len(WRITTEN_BACK)  # each written-back form reached the prompt
