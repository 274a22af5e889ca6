"""Red team: what a replaying policy controls is the calls it makes. It gets a recorded result only for the next
recorded call of the same server with the same tool and arguments: not another server's, not one out of order,
and not again once it left the recording. The call it diverged with is kept bounded and valid JSON however long
it is, and a rollout whose replay spec is malformed is refused by the gateway (its row is the platform's)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from rollwire.errors import InvalidRequest
from rollwire.mcp_servers.gateway.replay import CALL_CHARS, Decision, ReplayBook, ReplaySpec
from rollwire.store import ReplayDivergence, Rollout, Run, ToolEvent, open_engine, session_scope

RECORDED = [("mail", "read_message", {"message_id": "m1"}), ("calendar", "list_events", {})]


def _store(tmp_path: Path) -> ReplayBook:
    engine = open_engine(f"sqlite:///{tmp_path / 'store.db'}")
    with session_scope(engine) as session:
        session.add(Run(id="r"))
        session.flush()
        for rollout in ("recorded", "replay", "other"):
            session.add(Rollout(id=rollout, run_id="r", token_hash=rollout))
        session.flush()
        for at, (server, tool, arguments) in enumerate(RECORDED):
            result = {"content": [{"type": "text", "text": f"{tool} answer"}], "isError": False}
            session.add(ToolEvent(rollout_id="recorded", server=server, tool=tool, arguments_json=json.dumps(arguments),
                                  result_json=json.dumps(result), started_ns=at + 1))  # fmt: skip
    return ReplayBook(engine)


def test_a_recorded_result_answers_only_its_own_call(tmp_path: Path) -> None:
    book = _store(tmp_path)
    spec = ReplaySpec("recorded", "stop")

    async def calls() -> list[Decision]:
        other_server = await book.decide("other", spec, "calendar", "read_message", {"message_id": "m1"})
        first = await book.decide("replay", spec, "mail", "read_message", {"message_id": "m1"})
        out_of_order = await book.decide("replay", spec, "mail", "read_message", {"message_id": "m1"})
        after = await book.decide("replay", spec, "calendar", "list_events", {})
        return [other_server, first, out_of_order, after]

    other_server, first, out_of_order, after = anyio.run(calls)
    assert other_server.answer is None and other_server.refuse  # the mail server's result is not the calendar's
    assert first.answer is not None and first.answer.result["content"][0]["text"] == "read_message answer"
    assert out_of_order.answer is None and "no further call on 'mail'" in (out_of_order.refuse or "")
    assert after.answer is None and after.refuse  # the recording's next call, but the replay has left it


def test_the_diverging_call_is_kept_bounded(tmp_path: Path) -> None:
    book = _store(tmp_path)
    huge = {"message_id": "m" * 1_000_000, "nested": [{"x": "\u202e" * 1000}]}
    decision = anyio.run(book.decide, "replay", ReplaySpec("recorded"), "mail", "read_message", huge)
    assert decision.answer is None and decision.refuse is None  # live from here
    with session_scope(book._engine) as session:  # noqa: SLF001 - the row the report reads
        (row,) = session.query(ReplayDivergence).all()
    assert len(row.actual_json) <= CALL_CHARS + 200 and json.loads(row.actual_json)["tool"] == "read_message"
    assert json.loads(row.expected_json) == {"tool": "read_message", "arguments": {"message_id": "m1"}}


@pytest.mark.parametrize(
    "meta", [{"replay": "recorded"}, {"replay": {"of": ""}}, {"replay": {"of": "x", "on_divergence": "ignore"}}]
)
def test_a_malformed_replay_spec_is_refused(meta: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest, match="meta.replay"):
        ReplaySpec.of_meta(meta)
