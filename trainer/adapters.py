"""LoRA on the policy (PEFT): the trainer updates low-rank deltas while every checkpoint stays a plain model.

A checkpoint holds the merged weights (base + delta) under the base model's own names, so the engines, ``rollwire
replay --policy`` and evaluation load it like any full fine-tune; the adapter itself is saved beside them
(``<checkpoint>/adapter``) so a resumed trainer continues the same deltas with the same optimizer moments.
The merge is computed, never applied in place: merging and unmerging would round the frozen base a little at
every push.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rollwire.errors import InvalidRequest

ADAPTER_DIR = "adapter"
"""The adapter's folder inside a checkpoint (PEFT's ``adapter_config.json`` + ``adapter_model.safetensors``)."""
ADAPTER_NAME = "default"
INSTALL = "pip install 'rollwire[lora]'"


@dataclass(frozen=True, slots=True)
class LoraSpec:
    rank: int
    alpha: float = 0.0
    """Scale numerator (the delta is B @ A * alpha / rank); 0 means 2 x rank."""
    targets: str = "all-linear"
    """PEFT's ``target_modules``: ``all-linear`` (every linear layer but the output head) or comma-separated names."""

    @property
    def scale_alpha(self) -> float:
        return self.alpha or 2.0 * self.rank


def _peft() -> Any:
    try:
        import peft
    except ImportError as exc:
        raise InvalidRequest(f"LoRA needs PEFT, which is not installed: {INSTALL}", param="lora_rank") from exc
    return peft


@contextlib.contextmanager
def _quiet_peft() -> Iterator[None]:
    """PEFT asks transformers a question transformers has renamed; its FutureWarning is for PEFT, not our users."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def add_lora(model: torch.nn.Module, spec: LoraSpec) -> torch.nn.Module:
    """``model`` wrapped with fresh adapters (B = 0: the wrapped model computes exactly what ``model`` did)."""
    if spec.rank < 1:
        raise InvalidRequest("--lora-rank must be at least 1 (0 trains every weight)", param="lora_rank")
    peft = _peft()
    targets: Any = spec.targets if spec.targets == "all-linear" else [t.strip() for t in spec.targets.split(",")]
    config = peft.LoraConfig(r=spec.rank, lora_alpha=spec.scale_alpha, target_modules=targets, lora_dropout=0.0,
                             bias="none", task_type="CAUSAL_LM")  # fmt: skip
    with _quiet_peft():
        return peft.get_peft_model(model, config)


def load_lora(model: torch.nn.Module, checkpoint: Path) -> torch.nn.Module:
    """``model`` (the base) with the adapter a checkpoint saved, trainable."""
    folder = checkpoint / ADAPTER_DIR
    if not (folder / "adapter_config.json").is_file():
        raise InvalidRequest(f"{checkpoint} holds no LoRA adapter ({ADAPTER_DIR}/adapter_config.json): it was "
                             "trained without --lora-rank; resume it the same way", param="lora_rank")  # fmt: skip
    peft = _peft()
    with _quiet_peft():
        return peft.PeftModel.from_pretrained(model, str(folder), is_trainable=True)


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


def hf_model(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model under the adapters (``model`` itself without any)."""
    return model.get_base_model() if is_lora(model) else model  # type: ignore[operator]


def trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """What the optimizer updates: the adapters under LoRA, every weight otherwise."""
    return [p for p in model.parameters() if p.requires_grad]


def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The base model's state dict, on CPU, with every adapter's delta added to the weight it adapts."""
    from peft.tuners.lora import LoraLayer

    base = hf_model(model)
    deltas = {
        # every concrete LoRA layer (Linear, Embedding, Conv) has it; the base class does not declare it
        f"{name}.base_layer.weight": module.get_delta_weight(ADAPTER_NAME).detach()  # type: ignore[attr-defined]
        for name, module in base.named_modules()
        if isinstance(module, LoraLayer) and ADAPTER_NAME in module.lora_A
    }
    out: dict[str, torch.Tensor] = {}
    for key, value in base.state_dict().items():
        if ".lora_" in key:
            continue
        weight = value.detach()
        if key in deltas:
            weight = weight + deltas[key].to(weight.dtype)
        out[key.replace(".base_layer.", ".")] = weight.cpu()
    return out


def save_adapter(model: torch.nn.Module, checkpoint: Path) -> None:
    model.save_pretrained(str(checkpoint / ADAPTER_DIR))  # type: ignore[operator]


__all__ = [
    "ADAPTER_DIR",
    "LoraSpec",
    "add_lora",
    "hf_model",
    "is_lora",
    "load_lora",
    "merged_state_dict",
    "save_adapter",
    "trainable",
]
