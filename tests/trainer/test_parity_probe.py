"""Must-show 3: the parity probe after a weight push, against the bundled engine and real vLLM.

The tied-embedding case: the tiny model ties its output head to its input embedding (as small Qwen3 models
do). A push that changes the embedding must change what the engine serves in both places; vLLM's in-place
reload keeps the old head unless the head is written under its own name, and the probe finds that.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from transformers import Qwen3ForCausalLM

from rollwire.app.serving import ServerThread
from rollwire.settings import EngineSettings
from rollwire.trainer.parity import ParityError, ParityProbe, check_sink
from rollwire.trainer.weights import EngineReloadSink, VLLMReloadSink
from tests.trainer.conftest import load_tiny

TOLERANCE = 1e-3
"""The trainer's default: fp32 on CPU, engine and trainer agree far closer (see the figures printed)."""


def _tied_change(tiny_model_dir: Path, out: Path, scale: float = 0.05) -> torch.nn.Module:
    """The tiny model with its tied embedding (and so its output head) perturbed, saved as HF saves it."""
    model = load_tiny(tiny_model_dir)
    assert isinstance(model, Qwen3ForCausalLM)  # the tiny model's architecture
    assert model.config.tie_word_embeddings
    torch.manual_seed(1)
    with torch.no_grad():
        model.model.embed_tokens.weight.add_(torch.randn_like(model.model.embed_tokens.weight) * scale)
    model.save_pretrained(str(out), safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (tiny_model_dir / name).is_file():
            shutil.copy2(tiny_model_dir / name, out / name)
    return model


@pytest.fixture(scope="module")
def engine_url(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from rollwire.engine import create_app

    with ServerThread(
        create_app(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path_factory.mktemp("e"))
    ) as s:
        yield s.url


def test_bundled_engine_push_of_a_tied_embedding_change_passes_the_probe(
    engine_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    with httpx.Client(timeout=120) as client:
        base = ParityProbe(client, TOLERANCE).measure(engine_url, load_tiny(tiny_model_dir))
        model = _tied_change(tiny_model_dir, tmp_path / "step-1")
        sink = EngineReloadSink(engine_url, client)
        sink.push(tmp_path / "step-1", 1)
        after = check_sink(sink, model, TOLERANCE)
        assert after is not None and after.ok
        assert after.engine != base.engine  # the push changed what is served: the probe compared new weights
        print(f"bundled engine after a tied-embedding push: max |diff| {after.max_abs_diff:.3g}")
        sink.push(tiny_model_dir, 2)  # back to the base weights for the module's other tests


def test_the_probe_fails_loudly_with_the_figures_when_the_engine_serves_other_weights(
    engine_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    trained = _tied_change(tiny_model_dir, tmp_path / "never-pushed")
    with httpx.Client(timeout=120) as client, pytest.raises(ParityError) as caught:
        check_sink(EngineReloadSink(engine_url, client), trained, TOLERANCE)
    message = caught.value.message
    assert "does not serve the pushed weights" in message and "tolerance 0.001" in message
    assert "engine -" in message and "trainer -" in message  # both logprobs of the worst token are shown


def test_vllm_push_of_a_tied_embedding_change_is_found_and_made_right(
    vllm_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    model = _tied_change(tiny_model_dir, tmp_path / "step-1")
    with httpx.Client(timeout=300) as client:
        base = ParityProbe(client, TOLERANCE).measure(vllm_url, load_tiny(tiny_model_dir))
        assert base.ok, base.describe()  # before any push vLLM serves the checkpoint
        # without the explicit head: vLLM keeps its old output head; the probe fails the push, with figures
        VLLMReloadSink(vllm_url, client, explicit_tied_head=False).push(tmp_path / "step-1", 1)
        with pytest.raises(ParityError) as caught:
            check_sink(VLLMReloadSink(vllm_url, client), model, TOLERANCE)
        before_fix = ParityProbe(client, TOLERANCE).measure(vllm_url, model)
        # the sink's default writes the tied head under its own name: vLLM now serves the pushed weights
        sink = VLLMReloadSink(vllm_url, client)
        sink.push(tmp_path / "step-1", 2)
        after_fix = check_sink(sink, model, TOLERANCE)
        assert after_fix is not None and after_fix.ok
        print(f"vLLM tied-embedding push: without the explicit head {before_fix.describe()}; "
              f"with it max |diff| {after_fix.max_abs_diff:.3g}")  # fmt: skip
        assert "does not serve the pushed weights" in caught.value.message
        restore = tmp_path / "base"
        shutil.copytree(tiny_model_dir, restore)
        sink.push(restore, 3)  # the session's vLLM serves the base weights again for later tests
        assert check_sink(sink, load_tiny(tiny_model_dir), TOLERANCE) is not None
