"""The Tracker protocol: where step metrics go besides the JSON lines (TensorBoard, W&B, MLflow, trackio)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

SKIPPED = frozenset({"step", "time"})
"""Record keys that are the axis, not a curve."""


@dataclass(frozen=True, slots=True)
class TrackerRun:
    """What every tracker needs to open a run: its folder (all it writes stays under it), names and config."""

    folder: Path
    project: str
    run_name: str
    config: Mapping[str, Any] = field(default_factory=dict)


class Tracker(Protocol):
    """Receives each optimizer step's scalars; ``close`` flushes and ends the run (files complete on disk)."""

    name: str

    def log(self, step: int, metrics: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


def scalars(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of a step record (ids, lists, flags and NaNs left out), keys optionally prefixed."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if key in SKIPPED or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[prefix + key] = float(value)
    return out


def plain_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run config every tracker can store: numbers, strings and booleans as they are, anything else as text."""
    return {k: v if isinstance(v, int | float | str | bool) or v is None else str(v) for k, v in config.items()}


__all__ = ["Tracker", "TrackerRun", "plain_config", "scalars"]
