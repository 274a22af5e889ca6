"""Which real parts a test run left out, said in the run's last line.

A test that needs a real part the machine lacks (vLLM's CPU build, PostgreSQL, Chromium, a harness binary, a
cluster) skips and says why. Many skips scroll by; the run's closing line names each real part that went
unexercised, with how many tests that cost and what runs them, so a green run cannot be mistaken for a full one.
"""

from __future__ import annotations

from collections import Counter

import pytest

from rollwire import sandbox

REAL_PARTS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("mini-swe-agent", ("mini-swe-agent",), ".ci/run"),
    ("vLLM's CPU build", ("vllm",), ".ci/run"),
    ("PostgreSQL", ("postgres",), ".ci/run"),
    ("Chromium", ("chromium",), ".ci/run"),
    ("image assembly (mmdebstrap, buildah)", ("mmdebstrap", "buildah"), ".ci/run"),
    ("checkov", ("checkov",), ".ci/run"),
    ("bubblewrap", ("sandbox here", "bubblewrap", "bwrap"), ".ci/run"),
    ("Codex CLI", ("codex",), ".ci/run"),
    ("Claude Code", ("claude",), ".ci/run"),
    ("npm MCP servers", ("npm install",), ".ci/run"),
    ("the shared Qwen tokenizer", ("tokenizer",), ".ci/run"),
    ("a Kubernetes cluster", ("kubeconfig", "cluster"), "a machine with a kubeconfig"),
)
"""(real part, words of its skip reasons, what runs it); the first part whose words a reason holds is the one."""


needs_sandbox = pytest.mark.skipif(
    sandbox.probe("bwrap") is not None, reason=f"no sandbox here: {sandbox.probe('bwrap')} (.ci/run installs it)"
)
"""For a test that runs rollouts in real bubblewrap sandboxes: skipped, naming the part, where none can be made."""


def part_of(reason: str) -> str | None:
    """The real part a skip reason names, or None (a skip for another cause: a platform, an optional library)."""
    text = reason.lower()
    for name, words, _ in REAL_PARTS:
        if any(word in text for word in words):
            return name
    return None


def closing_line(reasons: list[str]) -> str:
    """One line: each real part the run did not exercise (tests skipped for it), and what runs it."""
    missed = Counter(part for part in map(part_of, reasons) if part is not None)
    if not missed:
        return "real parts: every one this suite uses was exercised"
    where = {name: runner for name, _, runner in REAL_PARTS}
    named = ", ".join(f"{name} ({count} skipped)" for name, count in sorted(missed.items(), key=lambda kv: -kv[1]))
    runners = sorted({where[name] for name in missed}, key=lambda runner: runner != ".ci/run")
    return f"real parts not exercised: {named}; run by: {' and '.join(runners)}"


__all__ = ["REAL_PARTS", "closing_line", "needs_sandbox", "part_of"]
