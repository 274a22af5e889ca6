"""Engine fixtures: one running engine over the tiny model for the module, and the same model loaded directly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from rollwire.app.serving import ServerThread
from rollwire.engine import create_app
from rollwire.settings import EngineSettings


@pytest.fixture(scope="session")
def logprob_tolerance() -> float:
    """Engine logprobs vs a direct float32 forward pass: batching and padding change only the summation order."""
    return 1e-4


@pytest.fixture(scope="module")
def engine_url(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A running engine serving the tiny model, shared by one test module."""
    app = create_app(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path_factory.mktemp("home"))
    with ServerThread(app) as server:
        yield server.url


@pytest.fixture(scope="session")
def reference_model(tiny_model_dir: Path) -> Any:
    """The tiny model loaded with plain transformers, for forward passes to compare against."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def forward_logprobs(reference_model: Any) -> Callable[[list[int], list[int]], list[float]]:
    """log_softmax of one plain forward pass over prompt + sampled ids, at each sampled token."""

    def compute(prompt_ids: list[int], sampled_ids: list[int]) -> list[float]:
        ids = torch.tensor([prompt_ids + sampled_ids])
        with torch.inference_mode():
            logits = reference_model(input_ids=ids).logits[0].float()
        logprobs = logits.log_softmax(dim=-1)
        start = len(prompt_ids) - 1
        return [float(logprobs[start + j, t]) for j, t in enumerate(sampled_ids)]

    return compute


@pytest.fixture(scope="module")
def model_name(engine_url: str) -> str:
    """The name the module's engine serves under."""
    import httpx

    return str(httpx.get(f"{engine_url}/v1/models", timeout=10).json()["data"][0]["id"])
