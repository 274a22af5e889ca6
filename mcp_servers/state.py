"""Per-rollout environment state on disk: one folder per rollout, seeded from the task, swept after a TTL.

State lives in files (not process memory) so the checker can read a rollout's final state from another
process, and one server process can serve many rollouts at once without them seeing each other.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.rollout_files import read_beneath

ROLLOUT_HEADER = "x-rollwire-rollout"
"""Header carrying the rollout id from the gateway to our servers."""
TASK_HEADER = "x-rollwire-task"
"""Header carrying ``suite:task_id`` so a server can seed a rollout's state on first use."""
SECRET_HEADER = "x-rollwire-env-secret"
"""Header carrying the secret shared by the gateway and the env servers; a call without it is refused."""

_ROLLOUT_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")
"""A rollout id is one plain folder name: no separators, never '.' or '..' (nor any leading dot)."""
_MARKER = ".created"


Seeder = Callable[[Path, dict[str, Any]], None]
"""Writes one server's initial state (its part of the task's initial state) into a rollout folder."""


class StateStore:
    """Maps a rollout id to its state folder; creates it from the task on first use, removes it after ``ttl_s``."""

    def __init__(self, root: Path, ttl_s: float = 3600.0, task_initial: Callable[[str], dict[str, Any]] | None = None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.ttl_s = ttl_s
        self._task_initial = task_initial
        self._lock = threading.Lock()
        self._last_sweep = 0.0

    def folder(self, rollout_id: str) -> Path:
        """The folder of ``rollout_id`` (it may not exist yet)."""
        if not _ROLLOUT_RE.match(rollout_id or "") or ".." in rollout_id:
            raise InvalidRequest(
                "rollout id must be 1-128 characters of letters, digits, '.', '_' or '-', not starting with '.'"
            )
        return self.root / rollout_id

    def ensure(self, rollout_id: str, task_ref: str | None, server: str, seed: Seeder) -> Path:
        """The rollout's folder with ``server``'s state seeded (once) from the task's initial state."""
        self.sweep()
        folder = self.folder(rollout_id)
        marker = folder / f"{_MARKER}.{server}"
        with self._lock:
            if not marker.exists():
                folder.mkdir(parents=True, exist_ok=True)
                initial = self._initial(task_ref).get(server, {})
                seed(folder, initial)
                marker.write_text(json.dumps({"task": task_ref, "created": time.time()}))
            (folder / _MARKER).touch()
        return folder

    def _initial(self, task_ref: str | None) -> dict[str, Any]:
        if not task_ref or self._task_initial is None:
            return {}
        return self._task_initial(task_ref)

    def sweep(self, now: float | None = None) -> int:
        """Remove folders unused for longer than the TTL (at most once a second); returns how many went."""
        now = time.time() if now is None else now
        if now - self._last_sweep < 1.0 and now >= self._last_sweep:
            return 0
        self._last_sweep = now
        removed = 0
        for folder in self.root.iterdir():
            marker = folder / _MARKER
            if folder.is_dir() and marker.exists() and now - marker.stat().st_mtime > self.ttl_s:
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        return removed

    def remove(self, rollout_id: str) -> None:
        """Drop a rollout's state now (after it was scored)."""
        shutil.rmtree(self.folder(rollout_id), ignore_errors=True)


JSON_MAX_BYTES = 64 << 20
"""Largest JSON state file read: a mailbox or calendar a rollout filled past it is refused, not loaded."""


def read_json(path: Path, default: Any, max_bytes: int = JSON_MAX_BYTES) -> Any:
    """A JSON state file, or ``default`` when it does not exist yet.

    The rollout may influence its folder (through the workspace server, or a harness sharing it), so the file is
    read as a rollout-written one: a symlink, FIFO, device, hard link or a file over ``max_bytes`` raises
    ``RefusedFile`` instead of being followed, blocking the reader or filling memory."""
    data = read_beneath(path.parent, path.name, max_bytes)
    return default if data is None else json.loads(data)


def write_json(path: Path, value: Any) -> None:
    """Replace a JSON state file atomically (a reader never sees half a file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=1, sort_keys=True))
    tmp.replace(path)


__all__ = [
    "JSON_MAX_BYTES",
    "ROLLOUT_HEADER",
    "SECRET_HEADER",
    "TASK_HEADER",
    "Seeder",
    "StateStore",
    "read_json",
    "write_json",
]
