"""One live status line for long commands (`rollwire demo`, `rollwire rl`): elapsed time, the phase, and either
the rollouts done / running / failed with the mean reward so far, or a training step's detail."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from rollwire.orchestrator.scheduler import Progress


class LiveLine:
    """One live status line: elapsed time (ticking), phase, then rollouts done / running / failed and the mean
    reward so far, or the training step / steps, loss and tokens/s. A finished phase leaves one printed line."""

    def __init__(self, console: Console) -> None:
        from rich.live import Live

        self.started = time.monotonic()
        self.console = console
        self.phase, self.detail = "", ""
        self.progress: Progress | None = None
        self.live = Live(console=console, refresh_per_second=4, transient=True, get_renderable=self._render)

    def __call__(self, phase: str, progress: Progress | None, detail: str = "") -> None:
        if phase != self.phase and self.phase:
            elapsed = time.monotonic() - self.started
            self.console.print(f"[dim]{elapsed:6.0f}s[/] done: {self.phase}")
        self.phase, self.progress, self.detail = phase, progress, detail
        self.live.refresh()

    def _render(self) -> Text:
        from rich.text import Text

        line = Text(f"{time.monotonic() - self.started:6.0f}s", style="bold")
        line.append(f" {self.phase}")
        progress = self.progress
        if progress is not None:
            mean = progress.mean_reward
            line.append(f"  rollouts {progress.done}/{progress.planned or '?'} done, {progress.running} running")
            failed = progress.failed + progress.timed_out
            line.append(f", {failed} failed" + (f", mean reward {mean:.2f}" if mean is not None else ""))
        if self.detail:
            line.append(f"  {self.detail}")
        return line


__all__ = ["LiveLine"]
