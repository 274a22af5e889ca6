"""The algorithm flags, each against values worked out by hand: advantage baselines and scalings (GRPO,
RLOO, batch std, none), Dr.GRPO's constant normaliser, GSPO's sequence ratio, overlong masking, the entropy
term, and truncated / masked importance sampling (TIS / MIS) for the engine-trainer mismatch."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from rollwire.trainer.advantages import group_advantages
from rollwire.trainer.batching import Sample, collate, token_weights
from rollwire.trainer.grpo import GRPOBatch, GRPOConfig, grpo_loss, prepare_grpo, with_proximal_logprobs
from rollwire.trainer.losses import anchored, is_weights, ppo_clip
from rollwire.trajectory import Segment, Trajectory

EPS = 1e-6


def test_advantage_baselines_and_scalings_by_hand() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    none = group_advantages(rewards, groups, std_scale="none").advantages.tolist()
    assert none == [0.5, -0.5, -0.5, 0.5, 1.0, -1.0]
    group = group_advantages(rewards, groups, std_scale="group").advantages
    expected_group = [0.5 / (0.5 + EPS)] + [-0.5 / (0.5 + EPS)] * 2 + [0.5 / (0.5 + EPS), 1 / (1 + EPS), -1 / (1 + EPS)]
    assert torch.allclose(group, torch.tensor(expected_group))
    # batch: mean 2/3, population variance ((1/3)^2 * 2 + (2/3)^2 * 3 + (4/3)^2) / 6 = 5/9
    batch = group_advantages(rewards, groups, std_scale="batch").advantages
    std = math.sqrt(5) / 3
    assert torch.allclose(batch, torch.tensor([0.5, -0.5, -0.5, 0.5, 1.0, -1.0]) / (std + EPS))
    # RLOO: reward minus the mean of the *other* members of the group
    rloo = group_advantages(rewards, groups, baseline="rloo").advantages
    assert torch.allclose(rloo, torch.tensor([1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3, 2 - 0, 0 - 2.0]))


def _sample(rollout: str, sampled: int, advantage: float = 1.0) -> Sample:
    n = 1 + sampled
    return Sample([3] * n, [0] + [1] * sampled, [0.0] * n, [-1] + [0] * sampled, advantage, rollout, 1.0)


def test_dr_grpo_constant_normaliser() -> None:
    samples = [_sample("a", 1), _sample("b", 3), _sample("b", 2)]
    # 2 rollouts x 10 tokens: every token weighs 1/20, however long its answer
    assert token_weights(samples, "constant", normaliser=10) == [0.05, 0.05, 0.05]


class _Logits(torch.nn.Module):
    """A 'model' whose logits are a parameter: the loss's gradient on them is checkable by hand."""

    def __init__(self, logits: list[list[list[float]]]) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.tensor(logits))

    def forward(self, **_: Any) -> Any:
        return SimpleNamespace(logits=self.logits)


def _grad(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s gradient, which the backward pass has filled in."""
    assert tensor.grad is not None
    return tensor.grad


def _softmax(row: list[float]) -> list[float]:
    e = [math.exp(x - max(row)) for x in row]
    return [x / sum(e) for x in e]


def _one_row(samples: list[Sample], weights: list[float]) -> Any:
    return collate(samples, [list(range(len(samples)))], weights, packed=True, pad_id=0)


def test_gspo_sequence_ratio_value_and_gradient() -> None:
    # sequence 0 samples tokens 1, 2 at positions 0, 1; sequence 1 samples token 0 at position 3
    rows = [[0.2, -0.1, 0.4], [0.0, 0.3, -0.3], [0.0, 0.0, 0.0], [0.5, 0.1, -0.2], [0.0, 0.0, 0.0]]
    logp = [math.log(_softmax(rows[0])[1]), math.log(_softmax(rows[1])[2]), math.log(_softmax(rows[3])[0])]
    behaviour = [logp[0] - 0.1, logp[1] + 0.3, logp[2] - 0.05]
    s0 = Sample([9, 1, 2], [0, 1, 1], [0.0, behaviour[0], behaviour[1]], [-1, 0, 0], 1.0, "r0", 1.0)
    s1 = Sample([9, 0], [0, 1], [0.0, behaviour[2]], [-1, 0], -1.0, "r1", 0.0)
    weights = token_weights([s0, s1], "sequence-mean")  # [1/4, 1/2]
    batch = _one_row([s0, s1], weights)
    model = _Logits([rows])
    loss, _ = grpo_loss(GRPOConfig(ratio_level="sequence", clip_low=0.2, clip_high=0.2))(model, batch)
    loss.backward()
    ratio0 = math.exp((0.1 - 0.3) / 2)  # exp(mean log ratio) = 0.905, inside [0.8, 1.2]
    ratio1 = math.exp(0.05)  # 1.051, A < 0, inside the clip range
    expected = 0.25 * 2 * (-1.0 * ratio0) + 0.5 * (1.0 * ratio1)
    assert math.isclose(float(loss.detach()), expected, rel_tol=1e-5)
    # d loss / d logp_t = -A * s_i * w_t (the GSPO gradient: s_i / |y_i| with sequence-mean's 1/|y_i|)
    dlogp = {0: (1, -ratio0 * 0.25), 1: (2, -ratio0 * 0.25), 3: (0, ratio1 * 0.5)}
    for pos, row in enumerate(rows):
        target, g = dlogp.get(pos, (0, 0.0))
        p = _softmax(row)
        want = [g * ((1.0 if v == target else 0.0) - p[v]) for v in range(3)]
        assert torch.allclose(_grad(model.logits)[0, pos], torch.tensor(want), atol=1e-6), pos

    clipped = ppo_clip(torch.tensor([[0.0, 0.0]]), torch.tensor([[-0.5, -0.5]]), torch.tensor([[1.0, 1.0]]),
                       log_ratio=torch.tensor([[0.5, 0.5]]))
    assert clipped.clipped.tolist() == [[1.0, 1.0]]  # the whole sequence is clipped together


def test_entropy_term_value_and_gradient() -> None:
    rows = [[0.3, -0.2, 0.1], [0.0, 0.0, 0.0]]
    s = Sample([9, 1], [0, 1], [0.0, math.log(_softmax(rows[0])[1])], [-1, 0], 0.0, "r", 0.0)  # A = 0: entropy only
    model = _Logits([rows])
    loss, stats = grpo_loss(GRPOConfig(entropy_coef=0.1))(model, _one_row([s], [1.0]))
    loss.backward()
    p = _softmax(rows[0])
    entropy = -sum(x * math.log(x) for x in p)
    assert math.isclose(float(loss.detach()), -0.1 * entropy, rel_tol=1e-6)
    # dH/dz_v = -p_v (log p_v + H); the loss is -0.1 H
    want = [0.1 * p[v] * (math.log(p[v]) + entropy) for v in range(3)]
    assert torch.allclose(_grad(model.logits)[0, 0], torch.tensor(want), atol=1e-7)
    assert math.isclose(stats["entropy_sum"], entropy, rel_tol=1e-6)


def test_truncated_and_masked_importance_weights_by_hand() -> None:
    trainer = torch.tensor([[-1.0, -0.5, -2.0, -3.0]])
    engine = torch.tensor([[-1.2, -1.5, -1.9, -2.0]])  # rho = e^0.2, e^1.0, e^-0.1, e^-1.0
    mask = torch.ones(1, 4)
    seq = torch.tensor([[0, 0, 1, 1]])
    rho = [math.exp(0.2), math.exp(1.0), math.exp(-0.1), math.exp(-1.0)]
    tis = is_weights(trainer, engine, mask, seq, mode="tis", cap=2.0)
    assert torch.allclose(tis, torch.tensor([[rho[0], 2.0, rho[2], rho[3]]]))
    mis = is_weights(trainer, engine, mask, seq, mode="mis", cap=2.0)  # kept inside [1/2, 2], else 0
    assert torch.allclose(mis, torch.tensor([[rho[0], 0.0, rho[2], 0.0]]))
    # sequence level: the product of the sequence's ratios, one weight for all its tokens
    seq_tis = is_weights(trainer, engine, mask, seq, mode="tis", level="sequence", cap=5.0)
    assert torch.allclose(seq_tis, torch.tensor([[math.exp(1.2)] * 2 + [math.exp(-1.1)] * 2]))
    seq_mis = is_weights(trainer, engine, mask, seq, mode="mis", level="sequence", cap=2.0)
    assert seq_mis.tolist() == [[0.0, 0.0, 0.0, 0.0]]  # e^1.2 > 2 and e^-1.1 < 1/2: both sequences rejected
    assert torch.equal(is_weights(trainer, engine, mask, seq, mode="none"), torch.ones(1, 4))


def test_tis_loss_weights_the_policy_gradient_by_the_truncated_ratio() -> None:
    rows = [[0.2, -0.1, 0.4], [0.0, 0.3, -0.3], [0.0, 0.0, 0.0]]
    logp = [math.log(_softmax(rows[0])[1]), math.log(_softmax(rows[1])[2])]
    engine = [logp[0] - 0.3, logp[1] - 1.5]  # rho = e^0.3 = 1.35, e^1.5 = 4.48 -> truncated to 2
    s = Sample([9, 1, 2], [0, 1, 1], [0.0, *engine], [-1, 0, 0], 0.5, "r", 1.0)
    model = _Logits([rows])
    loss, stats = grpo_loss(GRPOConfig(is_correction="tis", is_cap=2.0))(model, _one_row([s], [0.5, 0.5]))
    loss.backward()
    w = [math.exp(0.3), 2.0]
    # ratio to the trainer's own pre-update logprobs is 1: loss = sum_t weight_t * w_t * (-A)
    assert math.isclose(float(loss.detach()), 0.5 * (w[0] + w[1]) * -0.5, rel_tol=1e-6)
    for pos, target in ((0, 1), (1, 2)):
        p = _softmax(rows[pos])
        want = [0.5 * w[pos] * -0.5 * ((1.0 if v == target else 0.0) - p[v]) for v in range(3)]
        assert torch.allclose(_grad(model.logits)[0, pos], torch.tensor(want), atol=1e-7)
    assert math.isclose(stats["is_weight_sum"], w[0] + w[1], rel_tol=1e-6)


def test_truncated_rollouts_are_masked_but_still_set_the_baseline() -> None:
    def rollout(rid: str, reward: float, truncated: bool = False) -> Trajectory:
        seg = Segment([5, 6, 7], [0, 1, 1], [0.0, -0.1, -0.2], [-1, 0, 0], truncated=truncated)
        return Trajectory(rid, "run", "t", "g", reward, "finished", [seg])

    group = [rollout("long", 1.0, truncated=True), rollout("a", 0.0), rollout("b", 1.0), rollout("c", 0.0)]
    masked = prepare_grpo([group], GRPOConfig(mask_truncated=True), current_version=0)
    assert {s.rollout_id: s.advantage for s in masked.samples} == {"a": -0.5, "b": 0.5, "c": -0.5}
    assert masked.stats["rollouts_truncated_masked"] == 1.0
    kept = prepare_grpo([group], GRPOConfig(), current_version=0)
    assert {s.rollout_id for s in kept.samples} == {"long", "a", "b", "c"}


def test_passes_over_one_batch_clip_against_the_policy_before_the_first() -> None:
    """With a correction on, ``with_proximal_logprobs`` takes the trainer's logprobs once; a later pass, after
    the policy moved, clips against them (ratio > 1 + clip_high: no gradient), where anchoring on the current
    policy would see a ratio of 1 and keep pushing. The TIS weight is pi_proximal / pi_engine."""
    rows = [[0.2, -0.1, 0.4], [0.0, 0.3, -0.3], [0.0, 0.0, 0.0]]
    before = [math.log(_softmax(rows[0])[1]), math.log(_softmax(rows[1])[2])]
    engine = [before[0] - 0.1, before[1] + 0.2]
    s = Sample([9, 1, 2], [0, 1, 1], [0.0, *engine], [-1, 0, 0], 0.5, "r", 1.0)
    model = _Logits([rows])
    batch = with_proximal_logprobs(model, GRPOBatch([s], {}, ["r"]), pad_id=0)
    assert batch.samples[0].proximal_logprobs == pytest.approx([0.0, *before], abs=1e-6)

    moved = [[0.2, 0.9, 0.4], [0.0, 0.3, -0.3], [0.0, 0.0, 0.0]]  # a first pass raised token 1 at position 0
    after = math.log(_softmax(moved[0])[1])
    assert math.exp(after - before[0]) > 1.2  # beyond the clip for a positive advantage
    config = GRPOConfig(is_correction="tis", is_cap=2.0)
    w = [math.exp(0.1), math.exp(-0.2)]  # pi_proximal / pi_engine, under the cap
    anchored = _Logits([moved])
    loss, _ = grpo_loss(config)(anchored, _one_row(batch.samples, [0.5, 0.5]))
    loss.backward()
    # position 0: clipped at 1 + 0.2 (constant, no gradient); position 1: ratio 1, the plain weighted gradient
    assert math.isclose(float(loss.detach()), 0.5 * -0.5 * (w[0] * 1.2 + w[1] * 1.0), rel_tol=1e-6)
    assert torch.equal(_grad(anchored.logits)[0, 0], torch.zeros(3))
    p = _softmax(moved[1])
    want = [0.5 * w[1] * -0.5 * ((1.0 if v == 2 else 0.0) - p[v]) for v in range(3)]
    assert torch.allclose(_grad(anchored.logits)[0, 1], torch.tensor(want), atol=1e-7)

    unanchored = _Logits([moved])  # no proximal logprobs: the ratio is 1 and position 0 keeps its gradient
    loss, _ = grpo_loss(config)(unanchored, _one_row([s], [0.5, 0.5]))
    loss.backward()
    assert _grad(unanchored.logits)[0, 0].abs().sum() > 0


def test_stale_tokens_clip_around_the_policy_that_sampled_them() -> None:
    """With a correction on, a token an older policy sampled is clipped around the engine's logprob of it (the
    weight inside the ratio), a token of the trainer's own version around the trainer's, its weight outside."""
    rows = [[0.2, -0.1, 0.4], [0.0, 0.3, -0.3], [0.0, 0.0, 0.0], [0.5, 0.1, -0.2], [0.1, -0.4, 0.2], [0.0, 0.0, 0.0]]
    logp = [math.log(_softmax(rows[0])[1]), math.log(_softmax(rows[1])[2])]
    logp += [math.log(_softmax(rows[3])[1]), math.log(_softmax(rows[4])[2])]
    # version 0 sampled "old" (rho = e^0.1, e^0.3); version 1, the trainer's, sampled "new" (rho = e^0.3, e^-0.2)
    old = Segment([9, 1, 2], [0, 1, 1], [0.0, logp[0] - 0.1, logp[1] - 0.3], [-1, 0, 0])
    new = Segment([9, 1, 2], [0, 1, 1], [0.0, logp[2] - 0.3, logp[3] + 0.2], [-1, 1, 1])
    group = [Trajectory("old", "run", "t", "g", 1.0, "finished", [old]),
             Trajectory("new", "run", "t", "g", 0.0, "finished", [new])]  # fmt: skip
    config = GRPOConfig(is_correction="tis", is_cap=2.0)
    batch = prepare_grpo([group], config, current_version=1)
    assert [s.stale for s in batch.samples] == [[0, 1, 1], []]
    model = _Logits([rows])
    loss, stats = grpo_loss(config)(model, _one_row(batch.samples, [0.25, 0.25]))
    loss.backward()
    # "old", A = +0.5: ratios to the engine's logprobs e^0.1 (inside the clip) and e^0.3 (clipped at 1.2)
    # "new", A = -0.5: ratio 1 to the trainer's own logprobs, weighted by e^0.3 and e^-0.2 outside the clip
    want = 0.25 * (-0.5 * math.exp(0.1) - 0.5 * 1.2 + 0.5 * math.exp(0.3) + 0.5 * math.exp(-0.2))
    assert math.isclose(float(loss.detach()), want, rel_tol=1e-6)
    coefficient = {0: (1, 0.25 * -0.5 * math.exp(0.1)), 1: (2, 0.0), 3: (1, 0.25 * 0.5 * math.exp(0.3)),
                   4: (2, 0.25 * 0.5 * math.exp(-0.2))}  # fmt: skip
    for pos, (target, c) in coefficient.items():
        p = _softmax(rows[pos])
        expected = [c * ((1.0 if v == target else 0.0) - p[v]) for v in range(3)]
        assert torch.allclose(_grad(model.logits)[0, pos], torch.tensor(expected), atol=1e-7)
    # the statistics report the correction's weights wherever they were applied
    assert math.isclose(stats["is_weight_sum"], math.exp(0.1) + 2 * math.exp(0.3) + math.exp(-0.2), rel_tol=1e-6)


def test_anchored_moves_a_stale_weight_into_the_ratio_and_keeps_a_masked_token_dropped() -> None:
    proximal = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    weights = torch.tensor([[math.exp(0.1), 2.0, 0.0, math.exp(0.3)]])  # the last token is fresh
    stale = torch.tensor([[True, True, True, False]])
    old, outside = anchored(proximal, weights, stale)
    assert torch.allclose(old, torch.tensor([[-1.1, -1.0 - math.log(2.0), -1.0, -1.0]]))
    assert torch.allclose(outside, torch.tensor([[1.0, 1.0, 0.0, math.exp(0.3)]]))
    same_old, same_weights = anchored(proximal, weights, None)
    assert same_old is proximal and same_weights is weights
