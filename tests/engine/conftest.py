"""Engine fixtures: one running engine over the tiny model for the module, and the same model loaded directly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from rollwire.engine import create_app

from rollwire.serving import ServerThread
from rollwire.settings import EngineSettings

LOGPROB_TOLERANCE = 1e-4
"""Engine logprobs vs a direct float32 forward pass: batching and padding change only the summation order."""


def engine_settings(model_dir: Path, **overrides: Any) -> EngineSettings:
    return EngineSettings(model=str(model_dir), device="cpu", **overrides)


@pytest.fixture(scope="module")
def engine_url(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A running engine serving the tiny model, shared by one test module."""
    app = create_app(engine_settings(tiny_model_dir), tmp_path_factory.mktemp("home"))
    with ServerThread(app) as server:
        yield server.url


@pytest.fixture(scope="session")
def reference_model(tiny_model_dir: Path) -> Any:
    """The tiny model loaded with plain transformers, for forward passes to compare against."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()


def forward_logprobs(model: Any, prompt_ids: list[int], sampled_ids: list[int]) -> list[float]:
    """log_softmax of one plain forward pass over prompt + sampled ids, at each sampled token."""
    ids = torch.tensor([prompt_ids + sampled_ids])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0].float()
    logprobs = logits.log_softmax(dim=-1)
    start = len(prompt_ids) - 1
    return [float(logprobs[start + j, t]) for j, t in enumerate(sampled_ids)]


def served_model_name(url: str) -> str:
    import httpx

    return str(httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"])
