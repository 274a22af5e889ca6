"""TensorBoard: event files under ``<folder>``, one scalar curve per metric (torch's own SummaryWriter)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollwire.trainer.trackers.base import TrackerRun, plain_config, scalars


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, run: TrackerRun) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.folder = run.folder
        self._writer = SummaryWriter(log_dir=str(run.folder))
        config = plain_config(run.config)
        if config:
            self._writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in sorted(config.items())))

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        for key, value in scalars(metrics).items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()  # a killed trainer keeps its curves

    def close(self) -> None:
        self._writer.close()


__all__ = ["TensorBoardTracker"]
