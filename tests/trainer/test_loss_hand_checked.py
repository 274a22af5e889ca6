"""The GRPO loss and its gradient on a tiny batch equal a reference worked out by hand in the test."""

from __future__ import annotations

import math

import torch

from rollwire.trainer.batching import Sample, collate, token_weights
from rollwire.trainer.losses import kl_k3, ppo_clip, sft_nll, token_logprobs, weighted_sum


def _softmax(row: list[float]) -> list[float]:
    m = max(row)
    e = [math.exp(x - m) for x in row]
    return [x / sum(e) for x in e]


def test_ppo_clip_loss_and_gradient_match_hand_reference() -> None:
    # two positions, vocabulary of 3; behaviour logprobs chosen so one token is clipped, one not
    logits_rows = [[0.5, -0.2, 0.1], [0.0, 1.0, -1.0]]
    targets = [2, 1]
    advantages = [1.0, -0.5]
    probs = [_softmax(r) for r in logits_rows]
    logp = [math.log(probs[i][targets[i]]) for i in range(2)]
    behaviour = [logp[0] - 0.5, logp[1] + 0.05]  # ratios: e^0.5 ~ 1.65 (clipped at 1.2 for A>0), e^-0.05 ~ 0.95
    weights = [0.25, 0.75]

    logits = torch.tensor([logits_rows], requires_grad=True)
    lp = token_logprobs(logits, torch.tensor([targets]))
    terms = ppo_clip(lp, torch.tensor([behaviour]), torch.tensor([advantages]), clip_low=0.2, clip_high=0.2)
    loss = weighted_sum(terms.loss, torch.tensor([weights]))
    loss.backward()

    ratios = [math.exp(logp[i] - behaviour[i]) for i in range(2)]
    per_token = []
    dloss_dlogp = []
    for i in range(2):
        a, r = advantages[i], ratios[i]
        unclipped, clipped = -a * r, -a * min(max(r, 0.8), 1.2)
        per_token.append(max(unclipped, clipped))
        dloss_dlogp.append(weights[i] * (-a * r if unclipped >= clipped else 0.0))
    expected_loss = sum(w * t for w, t in zip(weights, per_token))
    expected_grad = [
        [dloss_dlogp[i] * ((1.0 if v == targets[i] else 0.0) - probs[i][v]) for v in range(3)] for i in range(2)
    ]

    assert math.isclose(float(loss.detach()), expected_loss, rel_tol=1e-6)
    assert terms.clipped.tolist() == [[1.0, 0.0]]
    assert logits.grad is not None
    assert torch.allclose(logits.grad[0], torch.tensor(expected_grad), atol=1e-7)


def test_ratio_cap_bounds_negative_advantage_loss() -> None:
    lp = torch.tensor([[0.0]])
    terms = ppo_clip(lp, torch.tensor([[-2.0]]), torch.tensor([[-1.0]]), ratio_cap=3.0)
    assert math.isclose(float(terms.loss.detach()), 3.0, rel_tol=1e-6)  # -A * cap, not -A * e^2
    assert float(terms.clipped) == 1.0


def test_kl_and_sft_terms_by_hand() -> None:
    lp, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    assert math.isclose(float(kl_k3(lp, ref)), math.exp(-0.5) + 0.5 - 1.0, rel_tol=1e-6)
    assert float(kl_k3(lp, lp)) == 0.0
    assert float(sft_nll(torch.tensor([-0.25]))) == 0.25


def test_token_weights_make_token_and_sequence_means() -> None:
    def sample(n_sampled: int, rollout: str) -> Sample:
        n = 2 + n_sampled
        return Sample([1] * n, [0, 0] + [1] * n_sampled, [0.0] * n, [-1, -1] + [0] * n_sampled, 1.0, rollout, 1.0)

    samples = [sample(1, "r1"), sample(3, "r2")]  # two rollouts (sequence-mean weighs rollouts, not segments)
    tok = token_weights(samples, "token-mean")
    seq = token_weights(samples, "sequence-mean")
    assert tok == [0.25, 0.25]
    assert seq == [0.5, 1.0 / 6.0]
    batch = collate(samples, [[0, 1]], seq, packed=True, pad_id=0)
    # per-token loss of 1 everywhere: sequence-mean of per-sequence means = 1
    assert math.isclose(float(weighted_sum(torch.ones_like(batch.loss_mask), batch.token_weights)), 1.0)
    assert batch.loss_mask.sum() == 4 and batch.position_ids.tolist() == [[0, 1, 2, 0, 1, 2, 3, 4]]
