"""Step trackers by name, imported lazily (each is an optional extra: ``pip install 'rollwire[NAME]'``)."""

from __future__ import annotations

import importlib
import importlib.util

from rollwire.errors import InvalidRequest
from rollwire.trainer.trackers.base import Tracker, TrackerRun, scalars

TRACKERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "tensorboard": ("rollwire.trainer.trackers.tensorboard_tracker", "TensorBoardTracker", ("tensorboard",)),
    "wandb": ("rollwire.trainer.trackers.wandb_tracker", "WandbTracker", ("wandb",)),
    "mlflow": ("rollwire.trainer.trackers.mlflow_tracker", "MlflowTracker", ("mlflow", "alembic")),
    "trackio": ("rollwire.trainer.trackers.trackio_tracker", "TrackioTracker", ("trackio",)),
}
"""Name -> (module, class, the Python packages it needs: its extra's)."""


def open_tracker(name: str, run: TrackerRun) -> Tracker:
    """The named tracker with its run open; a clear error for an unknown name or a tracker not installed."""
    if name not in TRACKERS:
        raise InvalidRequest(f"unknown tracker {name!r}; known: {', '.join(TRACKERS)}", param="tracker")
    module_name, class_name, packages = TRACKERS[name]
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        raise InvalidRequest(
            f"tracker {name!r} needs {', '.join(missing)}: pip install 'rollwire[{name}]'", param="tracker"
        )
    tracker: Tracker = getattr(importlib.import_module(module_name), class_name)(run)
    return tracker


__all__ = ["TRACKERS", "Tracker", "TrackerRun", "open_tracker", "scalars"]
