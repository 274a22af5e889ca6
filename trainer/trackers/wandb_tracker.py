"""Weights & Biases in offline mode: the run is written under ``<folder>/wandb/offline-run-*`` with no network and
no login; ``wandb sync <that folder>`` uploads it later."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollwire.trainer.trackers.base import TrackerRun, plain_config, scalars


class WandbTracker:
    name = "wandb"

    def __init__(self, run: TrackerRun) -> None:
        import wandb

        run.folder.mkdir(parents=True, exist_ok=True)
        self.folder = run.folder
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True)
        self._run = wandb.init(
            project=run.project, name=run.run_name, dir=str(run.folder), mode="offline",
            config=plain_config(run.config), settings=settings, reinit="create_new",
        )  # fmt: skip

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        self._run.log(scalars(metrics), step=step)

    def close(self) -> None:
        import wandb

        self._run.finish()
        wandb.teardown()  # ends W&B's background service process with the run, not at interpreter exit


__all__ = ["WandbTracker"]
