"""rollwire.trainer: GRPO / SFT on recorded trajectories from the proxy's stream, weight push, export.

Names are re-exported lazily, so ``rollwire export`` (no torch needed) does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GRPOConfig": "grpo",
    "grpo_step": "grpo",
    "prepare_grpo": "grpo",
    "SFTConfig": "sft",
    "sft_step": "sft",
    "group_advantages": "advantages",
    "ppo_clip": "losses",
    "StreamConfig": "stream",
    "TrajectoryStream": "stream",
    "TrainerState": "checkpoint",
    "save_checkpoint": "checkpoint",
    "latest_checkpoint": "checkpoint",
    "WeightSink": "weights",
    "EngineReloadSink": "weights",
    "VLLMReloadSink": "weights",
    "VLLMLoraSink": "weights",
    "ProxyVersionPublisher": "weights",
    "export_rows": "export",
    "run_training": "loop",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rollwire.trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rollwire.trainer.{_EXPORTS[name]}"), name)
