"""Per-step metrics: one JSON line per step in a file, and one short line on the console.

GRPO lines carry reward_mean/std, advantage_mean/std/min/max, clip_fraction, ratio_mean and
ratio_deviation_max (max |ratio - 1|), approx_kl, entropy, kl_ref (with a reference model), grad_norm,
tokens_per_s (tokens forwarded, padding included, per second of the step), policy_lag_mean/max,
groups / groups_zero_variance / rollouts_stale, policy_version and the step's rollout_ids.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

CONSOLE_KEYS = (
    ("loss", "loss", "{:.4f}"),
    ("reward_mean", "reward", "{:.3f}"),
    ("reward_std", "±", "{:.3f}"),
    ("advantage_std", "adv_std", "{:.3f}"),
    ("clip_fraction", "clip", "{:.3f}"),
    ("approx_kl", "kl", "{:.4f}"),
    ("entropy", "ent", "{:.3f}"),
    ("tokens_per_s", "tok/s", "{:.0f}"),
    ("policy_lag_max", "lag", "{:.0f}"),
)


class MetricsWriter:
    """Appends ``{"step", "time", ...}`` lines (flushed each step, so a killed trainer keeps its history)."""

    def __init__(self, path: Path | None, console: TextIO | None = sys.stderr) -> None:
        self.path = path
        self.console = console
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, "time": time.time(), **metrics}
        if self.path is not None:
            with self.path.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
        if self.console is not None:
            parts = [f"step {step}"]
            for key, label, fmt in CONSOLE_KEYS:
                if isinstance(metrics.get(key), int | float):
                    parts.append(f"{label} {fmt.format(metrics[key])}")
            print("  ".join(parts), file=self.console, flush=True)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


__all__ = ["MetricsWriter", "read_metrics"]
