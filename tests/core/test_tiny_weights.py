"""The tiny model loads pretrained weights from the package's data folder only when they were built for the
current spec, corpus and template (``scripts/pretrain_tiny.py`` records that key); otherwise it starts
from its random initialisation, and the cache folder changes with the weights file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from rollwire import tiny_model
from rollwire.tiny_model import TinyModelSpec, base_key, ensure_tiny_model


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_shipped_weights_load_only_with_their_key(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = TinyModelSpec()
    tiny_model.build_untrained(spec, tmp_path / "untrained")
    untrained = _weights(tmp_path / "untrained")
    trained = {k: (v + 0.01).to(torch.float16) for k, v in untrained.items() if k != "lm_head.weight"}
    shipped = tmp_path / "tiny_weights.safetensors"
    monkeypatch.setattr(tiny_model, "_weights_path", lambda: shipped)

    save_file(trained, str(shipped), metadata={"key": base_key(spec)})
    loaded = _weights(ensure_tiny_model(tmp_path / "home", spec))
    assert ensure_tiny_model(tmp_path / "home", spec) != tiny_model_dir  # the weights are part of the cache key
    for name, tensor in trained.items():
        assert torch.equal(loaded[name], tensor.float()), name
    assert torch.equal(loaded["lm_head.weight"], loaded["model.embed_tokens.weight"])  # still tied

    save_file(trained, str(shipped), metadata={"key": "built-for-another-spec"})
    stale = _weights(ensure_tiny_model(tmp_path / "home-stale", spec))
    assert all(torch.equal(stale[name], untrained[name]) for name in trained)  # random init, not stale weights


def test_the_shipped_weights_fit_the_current_spec(tiny_model_dir: Path) -> None:
    """The committed weights were built for today's spec, corpus and chat template; a change to any of them
    needs ``python scripts/pretrain_tiny.py`` rerun (otherwise the demo silently falls back to random weights
    that cannot copy a held-out word)."""
    spec = TinyModelSpec()
    state = tiny_model.shipped_weights(spec)
    assert state is not None, "rollwire/data/tiny_weights.safetensors is missing or stale: run scripts/pretrain_tiny.py"
    loaded = _weights(tiny_model_dir)  # the default model every test and the demo use
    assert all(isinstance(tensor, torch.Tensor) and torch.equal(loaded[name], tensor) for name, tensor in state.items())
