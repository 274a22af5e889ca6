"""bench/orchestrator.py runs end to end with a tiny N and prints its three tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rollwire.sandbox import probe

BENCH = Path(__file__).resolve().parents[2] / "bench" / "orchestrator.py"


def test_bench_smoke() -> None:
    out = subprocess.run(
        [
            sys.executable, str(BENCH), "--rollouts", "4", "--concurrency", "2", "4", "--local-rollouts", "2",
            "--warm-rollouts", "4", "--warm-concurrency", "2", "--start-delay", "0.2", "--run-time", "0.3",
        ],
        capture_output=True, text=True, timeout=180, check=True,
    ).stdout
    kube, warm, local = (part.strip().splitlines() for part in out.strip().split("\n\n"))
    assert kube[0].split() == [
        "concurrency", "rollouts", "rollouts/s", "peak", "pods", "CPU", "ms/rollout", "API", "CPU", "ms/rollout", "vs",
        "first",
    ]  # fmt: skip
    assert [line.split()[0] for line in kube[1:]] == ["2", "4"]
    assert all(float(line.split()[2]) > 0 and float(line.split()[4]) > 0 < float(line.split()[5]) for line in kube[1:])
    assert warm[0].split()[:3] == ["kubernetes", "pod", "start"] and len(warm) == 3
    cold, pool = (line.split() for line in warm[1:])
    assert cold[:2] == ["cold", "pods"] and pool[:2] == ["pool", "2"]
    assert float(cold[-4]) >= 0.2  # a cold start waits for the modelled pod start; a claimed pod does not
    assert local[0].split() == [
        "local", "runtime", "sandbox", "rollouts", "rollouts/s", "CPU", "s/rollout", "vs", "subprocess", "vs", "unsandboxed"
    ]  # fmt: skip
    modes = [tuple(line.rsplit(maxsplit=5)[0].rsplit(maxsplit=1)) for line in local[1:] if not line.startswith("(")]
    sandboxed = [] if probe("bwrap") else [("subprocess", "on"), ("warm pool", "on")]  # both sandbox rows, where bwrap is
    expected = [("subprocess", "off"), ("warm pool", "off"), *sandboxed]
    assert [(mode.strip(), sandbox) for mode, sandbox in modes] == expected
    assert all(float(line.split()[-4]) > 0 for line in local[1:] if line[0] != "(")  # rollouts/s
    assert all(float(line.split()[-3]) > 0 for line in local[1:3])  # CPU s/rollout (unsandboxed: counted)
