"""trackio (Hugging Face's local-first tracker): the project's SQLite store under ``<folder>``; ``trackio show``
(with ``TRACKIO_DIR`` set to that folder) opens its dashboard."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.trainer.trackers.base import TrackerRun, plain_config, scalars


def _point_trackio_at(folder: Path) -> None:
    """trackio reads its folder from ``TRACKIO_DIR`` once, when it is first imported: set it before that, and refuse
    a second folder in the same process (the first one would silently get the run)."""
    if "trackio" in sys.modules:
        from trackio import utils

        if Path(utils.TRACKIO_DIR).resolve() != folder.resolve():
            raise InvalidRequest(
                f"trackio already writes to {utils.TRACKIO_DIR} in this process; it cannot also write to {folder}",
                param="tracker_dir",
            )
        return
    os.environ["TRACKIO_DIR"] = str(folder)


class TrackioTracker:
    name = "trackio"

    def __init__(self, run: TrackerRun) -> None:
        run.folder.mkdir(parents=True, exist_ok=True)
        _point_trackio_at(run.folder)
        import trackio

        self.folder = run.folder
        self.project = run.project
        with contextlib.redirect_stdout(io.StringIO()):  # its banner would land in the middle of the trainer's lines
            self._run = trackio.init(
                project=run.project, name=run.run_name, config=plain_config(run.config), embed=False,
                auto_log_cpu=False, auto_log_gpu=False,
            )  # fmt: skip

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        self._run.log(scalars(metrics), step=step)

    def close(self) -> None:
        import trackio

        with contextlib.redirect_stdout(io.StringIO()):
            try:
                trackio.finish()  # also forgets the current run, so trackio's exit hook does not finish it again
            except RuntimeError:  # opened in another context: no current run there
                self._run.finish()


__all__ = ["TrackioTracker"]
