"""Faithfulness across engine and trainer, through the real bundled engine over HTTP.

Fresh on-policy samples from the engine: the trainer's recomputed logprobs of the sampled tokens match the
recorded behaviour logprobs within LOGPROB_TOLERANCE, and the first update's importance ratios are 1. The
update is then pushed to the engine (POST /reload_weights), and the next samples, tagged with the new
version, are faithful to the updated trainer weights in the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from rollwire.app.serving import ServerThread
from rollwire.engine import create_app
from rollwire.settings import EngineSettings
from rollwire.trainer.batching import micro_batches, samples_from, token_weights
from rollwire.trainer.checkpoint import TrainerState, save_checkpoint
from rollwire.trainer.distributed import DistContext
from rollwire.trainer.forward import forward_logprobs
from rollwire.trainer.grpo import GRPOConfig, grpo_step, prepare_grpo
from rollwire.trainer.weights import EngineReloadSink
from rollwire.trajectory import Segment, Trajectory

LOGPROB_TOLERANCE = 1e-4
"""Engine (KV-cached, batched decode) vs trainer (one packed float32 forward): only summation order differs."""

PROMPTS = [[17, 240, 33, 501, 90], [8, 64, 300, 12]]


@pytest.fixture()
def engine(tiny_model_dir: Path, tmp_path: Path) -> Iterator[str]:
    settings = EngineSettings(model=str(tiny_model_dir), device="cpu")
    with ServerThread(create_app(settings, tmp_path / "home")) as server:
        yield server.url


def _sample_groups(client: httpx.Client, seed: int) -> list[list[Trajectory]]:
    groups = []
    for g, prompt in enumerate(PROMPTS):
        body = {"prompt": prompt, "max_tokens": 8, "n": 4, "temperature": 1.0, "logprobs": 1, "seed": seed + g,
                "return_token_ids": True, "ignore_eos": True}
        reply = client.post("/v1/completions", json=body)
        assert reply.status_code == 200, reply.text
        data = reply.json()
        group = []
        for i, choice in enumerate(data["choices"]):
            prompt_ids, sampled = choice["prompt_token_ids"], choice["token_ids"]
            segment = Segment(
                token_ids=prompt_ids + sampled,
                loss_mask=[0] * len(prompt_ids) + [1] * len(sampled),
                logprobs=[0.0] * len(prompt_ids) + choice["logprobs"]["token_logprobs"],
                policy_versions=[-1] * len(prompt_ids) + [data["weight_version"]] * len(sampled),
            )
            group.append(Trajectory(f"s{seed}-{g}-{i}", "run", f"t{g}", f"g{g}", float(i % 2), "completed", [segment]))
        groups.append(group)
    return groups


def _max_logprob_gap(model: torch.nn.Module, groups: list[list[Trajectory]]) -> float:
    samples = [s for g in groups for t in g for s in samples_from(t, 0.0)]
    gap = 0.0
    with torch.no_grad():
        for batch in micro_batches(samples, token_weights(samples, "token-mean"), capacity=64, packed=True, pad_id=0):
            logp, _ = forward_logprobs(model, batch)
            gap = max(gap, float(((logp - batch.behaviour_logprobs).abs() * batch.loss_mask).max()))
    return gap


def test_recomputed_logprobs_match_and_first_ratios_are_one(engine: str, tiny_model: torch.nn.Module,
                                                            tiny_model_dir: Path, tmp_path: Path) -> None:
    config = GRPOConfig(micro_batch_tokens=64)
    optimizer = torch.optim.AdamW(tiny_model.parameters(), lr=1e-2)
    with httpx.Client(base_url=engine, timeout=120) as client:
        for version in (0, 1):
            groups = _sample_groups(client, seed=10 * version)
            recorded = {v for g in groups for t in g for v in t.policy_versions}
            assert recorded == {version}  # every sampled token tagged with the policy that sampled it
            assert _max_logprob_gap(tiny_model, groups) < LOGPROB_TOLERANCE
            batch = prepare_grpo(groups, config, current_version=version)
            metrics = grpo_step(tiny_model, optimizer, batch, config, ctx=DistContext(), pad_id=0)
            assert metrics["loss_tokens"] == 64 and metrics["policy_lag_max"] == 0
            assert metrics["ratio_deviation_max"] < 1e-3 and metrics["clip_fraction"] == 0.0  # ratios are 1
            if version == 0:  # push the update: the engine serves the trainer's new weights as version 1
                state = TrainerState(step=1, policy_version=1)
                weights = {k: v.detach().clone() for k, v in tiny_model.state_dict().items()}
                folder = save_checkpoint(tmp_path / "ckpt", state, weights, tiny_model, None, tiny_model_dir)
                EngineReloadSink(engine, client).push(folder, 1)
