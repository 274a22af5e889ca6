"""The stream consumer resumes after a cursor, never hands out a trajectory twice, and names bad input."""

from __future__ import annotations

from typing import Any

import pytest

from rollwire.errors import NotFound, Unauthorized
from rollwire.trainer.stream import StreamConfig, TrajectoryStream
from rollwire.trajectory import Segment, Trajectory


def _traj(cursor: int) -> Trajectory:
    seg = Segment([1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.7], [-1, 0, 0])
    return Trajectory(f"r{cursor}", "run", "t", "g", 1.0, "completed", [seg], cursor=cursor)


def test_resumes_after_cursor_and_skips_replays(fake_proxy: Any) -> None:
    proxy, url = fake_proxy
    for c in (1, 2, 3):
        proxy.add(_traj(c))
    stream = TrajectoryStream(StreamConfig(url, "op-key", "run", wait_s=0.2))
    assert [t.cursor for t in stream.poll()] == [1, 2, 3]
    assert stream.poll() == []  # long-poll ran out: nothing new
    proxy.add(_traj(4))
    proxy.add(_traj(2))  # a replayed line (cursor not after ours) is never handed out again
    assert [t.rollout_id for t in stream.poll()] == ["r4"]

    restarted = TrajectoryStream(StreamConfig(url, "op-key", "run", wait_s=0.2))
    restarted.cursor = 3
    assert [t.cursor for t in restarted.poll()] == [4]
    assert proxy.requests[-1]["after"] == "3" and proxy.requests[-1]["wait"] == "0.2"
    stream.close()
    restarted.close()


def test_bad_key_and_unknown_run_are_clear_errors(fake_proxy: Any) -> None:
    _, url = fake_proxy
    with pytest.raises(Unauthorized, match="operator key"):
        TrajectoryStream(StreamConfig(url, "wrong", "run", wait_s=0)).poll()
    with pytest.raises(NotFound, match="no run 'nope'"):
        TrajectoryStream(StreamConfig(url, "op-key", "nope", wait_s=0)).poll()


def test_malformed_line_is_an_upstream_error_naming_the_line(fake_proxy: Any) -> None:
    from rollwire.errors import UpstreamError

    proxy, url = fake_proxy
    proxy.add(_traj(1))
    proxy.lines.append('{"cursor": 2, "not": "a trajectory"}')
    with pytest.raises(UpstreamError, match="line 2 is not a trajectory"):
        TrajectoryStream(StreamConfig(url, "op-key", "run", wait_s=0)).poll()
