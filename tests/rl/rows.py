"""Rows of an RL run written by hand into a store, so every figure read from them can be worked out."""

from __future__ import annotations

from collections.abc import Sequence

from rollwire.rollouts import PlannedRollout, RolloutBook
from rollwire.store.schema import RolloutStatus as S


def write_group(
    book: RolloutBook, run_id: str, group: str, task: str, meta: dict[str, object], rewards: Sequence[float | None]
) -> None:
    """One group: a finished rollout per reward, a policy failure (counted 0) per None."""
    ids = book.plan(run_id, [PlannedRollout(task, group, i, meta) for i in range(len(rewards))])
    for rollout_id, reward in zip(ids, rewards, strict=True):
        book.set_status(rollout_id, S.STARTING)
        book.set_status(rollout_id, S.RUNNING)
        if reward is None:
            book.set_status(rollout_id, S.FAILED, error="harness exited with status 1")
        else:
            book.set_status(rollout_id, S.FINISHED, reward=reward)


def write_rl_run(book: RolloutBook, run_id: str = "rl-a", harness: str = "reference") -> None:
    """Train groups drawn at v1 (t1: 1, 0) and v2 (t2: 1, failed); held-out evaluations at v1 (h1: 0, 0; h2: 1, 0)
    and v3 (h1: 1, 1; h2: 1, 0.5)."""
    book.ensure_run(run_id, run_id, {"suite": "tiny", "harness": harness, "kind": "rl"})
    draw = {"index": 0, "task_id": "t1", "weight": 0.25, "pass_rate": None, "total_weight": 0.5, "seed": 0}
    train = {"purpose": "train", "drawn_at_version": 1, "draw": draw}
    write_group(book, run_id, f"{run_id}:draw-00000", "t1", train, [1.0, 0.0])
    train2 = {"purpose": "train", "drawn_at_version": 2, "draw": draw | {"index": 1, "task_id": "t2"}}
    write_group(book, run_id, f"{run_id}:draw-00001", "t2", train2, [1.0, None])
    for version, h1, h2 in ((1, [0.0, 0.0], [1.0, 0.0]), (3, [1.0, 1.0], [1.0, 0.5])):
        meta = {"purpose": "eval", "policy_version": version}
        write_group(book, run_id, f"{run_id}:eval-v{version}:h1", "h1", meta, h1)
        write_group(book, run_id, f"{run_id}:eval-v{version}:h2", "h2", meta, h2)


PROXY_DOWN = "the platform failed during the rollout: the proxy exited with status -9"


def write_faults(book: RolloutBook, run_id: str) -> None:
    """Two rollouts the platform failed: one lost with the proxy down on both its attempts (the second with no
    retry left), one lost once and finished on its retry. Their group has no purpose, so no other figure moves."""
    first, second = book.plan(run_id, [PlannedRollout("t1", f"{run_id}:faults", i) for i in range(2)])
    for rollout_id, reasons in ((first, [PROXY_DOWN, PROXY_DOWN]), (second, ["workload lost", None])):
        for attempt, reason in enumerate(reasons):
            book.set_status(rollout_id, S.STARTING)
            book.set_status(rollout_id, S.RUNNING)
            if reason is None:
                book.set_status(rollout_id, S.FINISHED, reward=1.0)
            elif attempt == len(reasons) - 1:
                book.set_status(rollout_id, S.FAILED, error=f"infrastructure (no retry left): {reason}")
            else:
                retry = book.fail_and_retry(book.get(rollout_id), S.RUNNING, error=f"infrastructure: {reason}")
                assert retry is not None
                rollout_id = retry
