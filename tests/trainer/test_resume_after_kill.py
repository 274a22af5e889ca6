"""A trainer SIGKILLed mid-run resumes from its checkpoint and cursor and trains on no trajectory twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rollwire.trajectory import Trajectory


def _train(url: str, model: Path, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "rollwire.app.cli", "train", "--admin-url", url, "--operator-key", "op-key", "--run", "run",
        "--model", str(model), "--output-dir", str(out), "--group-size", "2", "--lr", "1e-3",
        "--engine-url", url, "--stream-wait", "0.3", *extra,
    ]
    # the fake proxy's /reload_weights stands in for an engine but serves no model, so no parity probe can run
    # (tests/trainer/test_parity_probe.py covers the probe against real engines)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "ROLLWIRE_TRAINER__PARITY_TOLERANCE": "-1"}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)


def test_killed_trainer_resumes_without_retraining(
    fake_proxy: Any, tiny_model_dir: Path, tiny_model: torch.nn.Module, sampler: Callable[..., Trajectory], tmp_path: Path
) -> None:
    proxy, url = fake_proxy
    order = ["g1", "g2", "g1", "g3", "g2", "g3", "g4", "g4"]  # g2's first half waits in the buffer across step 1
    # each group's first member scores 1, its second 0: every step has a signal (a step without one costs no version)
    trajs = [
        sampler(tiny_model, [7, 8, 9], completion=[20 + i, 21 + i], reward=float(g not in order[:i]), group_id=g,
                cursor=i + 1)
        for i, g in enumerate(order)
    ]
    for t in trajs[:5]:  # step 1 trains g1 (after #3), step 2 g2 (after #5); g3's first half (#4) stays pending
        proxy.add(t)
    out = tmp_path / "out"
    first = _train(url, tiny_model_dir, out)
    try:
        # the trainer asks for more only after handling all it got: caught up = both steps done, now long-polling
        assert proxy.caught_up.wait(120), "trainer never caught up with the stream"
        assert first.poll() is None, "trainer exited early"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    assert (out / "latest").read_text() == "step-000002"
    state = json.loads((out / "step-000002" / "trainer_state.json").read_text())
    assert state["cursor"] == 5 and [p["group_id"] for p in state["pending"]] == ["g3"]

    for t in trajs[5:]:
        proxy.add(t)
    resumed_from = len(proxy.requests)
    second = _train(url, tiny_model_dir, out, "--exit-when-idle")
    output = second.communicate(timeout=120)[0].decode()
    assert second.returncode == 0, output[-2000:]

    assert proxy.requests[resumed_from]["after"] == "5"  # resumed at the checkpoint's cursor
    final = json.loads((out / "step-000004" / "trainer_state.json").read_text())
    trained = final["trained_rollouts"]
    assert sorted(trained) == sorted(t.rollout_id for t in trajs)  # every rollout, each exactly once
    assert len(trained) == len(set(trained))
    assert [r["weight_version"] for r in proxy.reloads] == [1, 2, 2, 3, 4]  # re-push after restart, then on
    assert proxy.versions == [1, 2, 2, 3, 4]
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    assert "step 4" in output
