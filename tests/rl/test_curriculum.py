"""The learnability draw rule, checked by hand: weight = max(p(1-p), floor) of a task's recent pass rate."""

from __future__ import annotations

import pytest

from rollwire.app.rl.curriculum import Curriculum
from rollwire.errors import InvalidRequest


def test_weights_follow_the_rule() -> None:
    curriculum = Curriculum(["solved", "half", "unseen", "hard"], floor=0.05)
    curriculum.record("solved", [1.0, 1.0, 1.0, 1.0])  # p = 1: p(1-p) = 0, floored to 0.05
    curriculum.record("half", [1.0, 0.0, 1.0, 0.0])  # p = 0.5: 0.25, the most
    curriculum.record("hard", [0.25, 0.0, 0.0, 0.0])  # partial credit: p = 1/16, 1/16 * 15/16 = 0.05859375
    assert curriculum.weight("solved") == 0.05
    assert curriculum.weight("half") == 0.25
    assert curriculum.weight("unseen") == 0.25  # never sampled: counted as p = 0.5, tried first
    assert curriculum.weight("hard") == pytest.approx(15 / 256)


def test_a_draw_records_its_reasons() -> None:
    curriculum = Curriculum(["a", "b"], seed=7, floor=0.05)
    curriculum.record("a", [1.0, 1.0])
    draw = curriculum.draw(3)
    assert (draw.index, draw.seed) == (3, 7)
    assert draw.total_weight == pytest.approx(0.05 + 0.25)
    assert draw.weight == curriculum.weight(draw.task_id)
    assert draw.pass_rate == curriculum.pass_rate(draw.task_id)
    assert draw.probability == pytest.approx(draw.weight / 0.30)
    assert draw.to_meta()["task_id"] == draw.task_id


def test_draws_repeat_from_the_same_history_and_follow_the_weights() -> None:
    def fresh() -> Curriculum:
        c = Curriculum(["solved", "half", "unseen"], seed=1, floor=0.05)
        c.record("solved", [1.0] * 8)
        c.record("half", [1.0, 0.0] * 4)
        return c

    first, again = fresh(), fresh()
    picks = [first.draw(i).task_id for i in range(5500)]
    assert picks == [again.draw(i).task_id for i in range(5500)]
    # weights 0.05 : 0.25 : 0.25 of 0.55 -> 500, 2500, 2500 expected of 5500
    counts = {task: picks.count(task) for task in ("solved", "half", "unseen")}
    assert 400 < counts["solved"] < 600
    assert 2300 < counts["half"] < 2700 and 2300 < counts["unseen"] < 2700


def test_only_the_recent_window_counts_and_rewards_are_clipped() -> None:
    curriculum = Curriculum(["t"], window=4)
    curriculum.record("t", [0.0] * 10)
    curriculum.record("t", [1.0, 1.0, 1.0, 5.0])  # the four most recent; 5.0 counts as a pass (1.0)
    assert curriculum.pass_rate("t") == 1.0
    curriculum.record("t", [-3.0])  # clipped to 0: the window is now 1, 1, 1, 0
    assert curriculum.pass_rate("t") == 0.75


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="at least one task"):
        Curriculum([])
    with pytest.raises(InvalidRequest, match="floor"):
        Curriculum(["a"], floor=0.0)
    with pytest.raises(InvalidRequest, match="floor"):
        Curriculum(["a"], floor=0.3)
