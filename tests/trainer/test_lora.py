"""`--lora-rank`: the trainer updates PEFT adapters only, and every checkpoint is a plain model holding base + delta.

The checkpoint is what the engines load and what replay and evaluation name by version, so it must compute exactly
what the trainer's adapted model computes; the adapter saved beside it lets a resumed run go on with the same
deltas and optimizer moments.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from rollwire.app.cli.__main__ import main
from rollwire.settings import TrainerSettings
from rollwire.trainer.adapters import load_lora
from rollwire.trainer.distributed import DistContext
from rollwire.trainer.loop import open_session
from rollwire.trajectory import Trajectory

pytest.importorskip("peft", reason="LoRA needs the lora extra (pip install 'rollwire[lora]'); .ci/run installs it")


def _train(url: str, model: Path, out: Path, *extra: str) -> int:
    return main(["train", "--admin-url", url, "--operator-key", "op-key", "--run", "run", "--model", str(model),
                 "--algo", "sft", "--sft-batch-size", "2", "--output-dir", str(out), "--exit-when-idle",
                 "--stream-wait", "0", "--lr", "1e-2", *extra])  # fmt: skip


def _logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def test_lora_checkpoints_are_merged_models_and_resume_the_adapters(
    fake_proxy: Any,
    tiny_model_dir: Path,
    tiny_model: torch.nn.Module,
    sampler: Callable[..., Trajectory],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    proxy, url = fake_proxy
    for i in range(4):
        proxy.add(sampler(tiny_model, [7, 8], completion=[30, 31, 32], reward=1.0, group_id=f"g{i}", cursor=i + 1))
    out = tmp_path / "out"
    assert _train(url, tiny_model_dir, out, "--lora-rank", "4") == 0
    step = out / "step-000002"
    assert json.loads((step / "adapter" / "adapter_config.json").read_text())["r"] == 4
    saved = load_file(str(step / "model.safetensors"))
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    assert saved.keys() == base.keys()  # the base model's own names: no adapter or base_layer keys
    changed = {k for k in saved if not torch.equal(saved[k], base[k])}
    assert changed and all(k.endswith("proj.weight") for k in changed)  # the adapted linears, nothing else

    # The checkpoint, loaded as a plain model, computes what base + adapter compute.
    merged = AutoModelForCausalLM.from_pretrained(str(step), dtype=torch.float32).eval()
    adapted = load_lora(AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32), step).eval()
    ids = [7, 8, 30, 31, 32, 9, 10]
    assert torch.allclose(_logits(merged, ids), _logits(adapted, ids), atol=1e-5)
    assert not torch.allclose(_logits(merged, ids), _logits(tiny_model, ids), atol=1e-3)  # it did learn
    first = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert first[1]["loss"] < first[0]["loss"]

    # Resumed with the same flag: the adapters and their AdamW moments go on from step 2.
    settings = TrainerSettings(lora_rank=4, run="run")
    resumed = open_session(settings, tiny_model_dir, out, DistContext())
    assert resumed.state.step == 2 and resumed.optimizer.state_dict()["state"]
    assert torch.allclose(_logits(resumed.model, ids), _logits(merged, ids), atol=1e-5)
    assert all("lora_" in name for name, p in resumed.model.named_parameters() if p.requires_grad)
    for i in range(4, 6):
        proxy.add(sampler(tiny_model, [7, 8], completion=[30, 31, 32], reward=1.0, group_id=f"g{i}", cursor=i + 1))
    assert _train(url, tiny_model_dir, out, "--lora-rank", "4") == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3]
    assert lines[2]["loss"] < lines[1]["loss"]
    assert torch.load(out / "step-000003" / "optimizer.pt", weights_only=True)["state"]  # the moments came along

    # Resumed without it: one line saying how, nothing trained.
    proxy.add(sampler(tiny_model, [7, 8], completion=[30, 31, 32], reward=1.0, group_id="g6", cursor=7))
    proxy.add(sampler(tiny_model, [7, 8], completion=[30, 31, 32], reward=1.0, group_id="g7", cursor=8))
    assert _train(url, tiny_model_dir, out) == 1
    assert "was trained with LoRA adapters: resume it with --lora-rank" in capsys.readouterr().err.splitlines()[-1]
    assert (out / "latest").read_text().strip() == "step-000003"


def test_a_full_run_is_not_resumed_as_lora_and_a_missing_peft_is_one_line(
    fake_proxy: Any,
    tiny_model_dir: Path,
    tiny_model: torch.nn.Module,
    sampler: Callable[..., Trajectory],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy, url = fake_proxy
    for i in range(2):
        proxy.add(sampler(tiny_model, [7, 8], completion=[30, 31], reward=1.0, group_id=f"g{i}", cursor=i + 1))
    out = tmp_path / "out"
    assert _train(url, tiny_model_dir, out) == 0
    assert not (out / "step-000001" / "adapter").exists()
    proxy.add(sampler(tiny_model, [7, 8], completion=[30, 31], reward=1.0, group_id="g2", cursor=3))
    assert _train(url, tiny_model_dir, out, "--lora-rank", "4") == 1
    assert "holds no LoRA adapter" in capsys.readouterr().err.splitlines()[-1]

    monkeypatch.setitem(sys.modules, "peft", None)  # as where the extra is not installed
    assert _train(url, tiny_model_dir, tmp_path / "other", "--lora-rank", "4") == 1
    assert capsys.readouterr().err.splitlines()[-1].endswith("pip install 'rollwire[lora]'")
