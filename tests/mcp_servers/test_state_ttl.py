"""Per-rollout state: seeded from the task on first use, once; separate per rollout; removed after the TTL."""

from __future__ import annotations

import time
from pathlib import Path

from rollwire.mcp_servers.envs import workspace
from rollwire.mcp_servers.state import StateStore


def test_seed_once_isolated_and_swept(tmp_path: Path) -> None:
    initial = {"tiny:t": {"workspace": {"files": {"notes/a.txt": "hello"}}}}
    store = StateStore(tmp_path, ttl_s=60, task_initial=initial.__getitem__)
    a = store.ensure("ra", "tiny:t", "workspace", workspace.seed)
    assert (a / "workspace" / "notes" / "a.txt").read_text() == "hello"
    (a / "workspace" / "notes" / "a.txt").write_text("changed")
    assert store.ensure("ra", "tiny:t", "workspace", workspace.seed) == a
    assert (a / "workspace" / "notes" / "a.txt").read_text() == "changed"  # not re-seeded
    b = store.ensure("rb", None, "workspace", workspace.seed)
    assert list((b / "workspace").iterdir()) == []
    assert store.sweep(now=time.time() + 30 + 2) == 0
    assert store.sweep(now=time.time() + 120) == 2
    assert not a.exists() and not b.exists()
