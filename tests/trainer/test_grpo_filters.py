"""What goes into a GRPO step: filters before advantages, one weight per rollout, the failure policy."""

from __future__ import annotations

import math

from rollwire.trainer.batching import Sample, token_weights
from rollwire.trainer.grpo import GRPOBatch, GRPOConfig, prepare_grpo, updates_nothing
from rollwire.trajectory import Segment, Trajectory


def _segment(version: int, sampled: int = 2, *, truncated: bool = False) -> Segment:
    n = 2 + sampled
    return Segment([5] * n, [0, 0] + [1] * sampled, [0.0, 0.0] + [-0.5] * sampled, [-1, -1] + [version] * sampled,
                   truncated=truncated)


def _rollout(rid: str, reward: float | None, *, version: int = 3, status: str = "finished", error: str | None = None,
             segments: list[Segment] | None = None) -> Trajectory:
    return Trajectory(rid, "run", "t", "g", reward, status, segments if segments is not None else [_segment(version)],
                      metadata={"error": error})


def _advantages(batch: GRPOBatch) -> dict[str, float]:
    return {s.rollout_id: s.advantage for s in batch.samples}


def test_stale_rollouts_leave_before_advantages_so_the_rest_stays_zero_mean() -> None:
    group = [_rollout("fresh-1", 1.0), _rollout("fresh-0", 0.0), _rollout("stale-a", 1.0, version=1),
             _rollout("stale-b", 1.0, version=1)]
    batch = prepare_grpo([group], GRPOConfig(max_policy_lag=1), current_version=3)
    assert _advantages(batch) == {"fresh-1": 0.5, "fresh-0": -0.5}  # not [0.25, -0.75] (centred with the stale ones)
    assert batch.stats["rollouts_stale"] == 2.0 and batch.rollout_ids == ["fresh-1", "fresh-0"]


def test_sequence_mean_counts_each_rollout_once_however_many_segments() -> None:
    def sample(rollout: str) -> Sample:
        return Sample([1, 2], [0, 1], [0.0, -1.0], [-1, 0], 1.0, rollout, 1.0)

    samples = [sample("three"), sample("three"), sample("three"), sample("one")]
    weights = token_weights(samples, "sequence-mean")
    share = {rid: sum(w * s.num_loss_tokens for w, s in zip(weights, samples) if s.rollout_id == rid)
             for rid in ("three", "one")}
    assert share == {"three": 0.5, "one": 0.5}  # was 0.75 / 0.25 (weighted per segment)


def test_policy_failures_train_with_the_failure_reward_infrastructure_ones_do_not() -> None:
    group = [
        _rollout("ok", 1.0),
        _rollout("crashed", None, status="failed", error="harness exited with status 1"),
        _rollout("looped", None, status="timed_out", error="deadline exceeded"),
        _rollout("lost", None, status="failed", error="infrastructure: pod evicted"),
        _rollout("gone", None, status="failed", error="infrastructure (no retry left): node lost"),
        _rollout("bad-image", None, status="failed", error="setup: image pull failed (ErrImagePull)"),
        _rollout("checker", None, status="failed", error="checker failed: KeyError: 'x'"),
    ]
    batch = prepare_grpo([group], GRPOConfig(), current_version=3)
    # rewards 1, 0, 0 -> mean 1/3
    expected = {"ok": 2 / 3, "crashed": -1 / 3, "looped": -1 / 3}
    assert all(math.isclose(_advantages(batch)[k], v, rel_tol=1e-6) for k, v in expected.items())
    assert set(batch.rollout_ids) == {"ok", "crashed", "looped"}
    assert batch.stats["rollouts_unscored"] == 4.0 and batch.stats["rollouts_failed_trained"] == 2.0
    assert {s.rollout_id: s.reward for s in batch.samples}["crashed"] == 0.0

    custom = prepare_grpo([group], GRPOConfig(failure_reward=-1.0), current_version=3)
    assert {s.rollout_id: s.reward for s in custom.samples}["looped"] == -1.0
    off = prepare_grpo([group], GRPOConfig(failure_reward=None), current_version=3)
    assert off.rollout_ids == []  # only one scored rollout left: a group of one has nothing to compare


def test_a_batch_of_zero_advantages_updates_nothing() -> None:
    flat = prepare_grpo([[_rollout("a", 1.0), _rollout("b", 1.0)]], GRPOConfig(drop_zero_variance=False), 3)
    assert flat.samples and updates_nothing(flat, GRPOConfig())
    assert not updates_nothing(flat, GRPOConfig(kl_coef=0.1))
    assert updates_nothing(prepare_grpo([[_rollout("a", 1.0), _rollout("b", 1.0)]], GRPOConfig(), 3), GRPOConfig())
