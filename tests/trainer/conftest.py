"""Trainer fixtures: the tiny model in memory and trajectories sampled from it (its own behaviour logprobs)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from rollwire.trajectory import Segment, Trajectory


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir), local_files_only=True)


def load_tiny(tiny_model_dir: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    return model.eval()


@torch.no_grad()
def sample_trajectory(
    model: torch.nn.Module,
    prompt: list[int],
    *,
    new_tokens: int = 6,
    completion: list[int] | None = None,
    reward: float | None = 0.0,
    group_id: str = "g0",
    cursor: int = 0,
    version: int = 0,
    seed: int = 0,
) -> Trajectory:
    """Sample (or force) a completion with the model and record its logprobs, as an engine would."""
    gen = torch.Generator().manual_seed(seed)
    ids = list(prompt)
    logprobs: list[float] = []
    for step in range(len(completion) if completion is not None else new_tokens):
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float()
        logp = torch.log_softmax(logits, -1)
        token = completion[step] if completion is not None else int(torch.multinomial(logp.exp(), 1, generator=gen))
        logprobs.append(float(logp[token]))
        ids.append(token)
    n_prompt, n_new = len(prompt), len(ids) - len(prompt)
    segment = Segment(
        token_ids=ids,
        loss_mask=[0] * n_prompt + [1] * n_new,
        logprobs=[0.0] * n_prompt + logprobs,
        policy_versions=[-1] * n_prompt + [version] * n_new,
    )
    return Trajectory(
        rollout_id=f"r-{uuid.uuid4().hex[:8]}",
        run_id="run",
        task_id=group_id,
        group_id=group_id,
        reward=reward,
        status="completed",
        segments=[segment],
        cursor=cursor,
    )


@pytest.fixture()
def sampler() -> Callable[..., Trajectory]:
    """Builds a Trajectory from the tiny model's own sampling (or a forced completion)."""
    return sample_trajectory


@pytest.fixture()
def tiny_model(tiny_model_dir: Path) -> torch.nn.Module:
    """A fresh float32 copy of the tiny model (tests train it)."""
    return load_tiny(tiny_model_dir)
