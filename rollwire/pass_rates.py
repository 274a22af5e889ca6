"""pass@k and pass^k of a task from n sampled rollouts of which c passed.

pass@k is the chance that at least one of k rollouts drawn without replacement from the n passes, the unbiased
estimator of Chen et al. (2021): ``1 - C(n-c, k) / C(n, k)``. pass^k is the chance that all k pass (Yao et al.,
tau-bench, 2024): ``C(c, k) / C(n, k)``: what a user who runs the agent k times and needs every run right sees.
A suite's figure is the mean over its tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import comb

from rollwire.errors import InvalidRequest

PASS_THRESHOLD = 1.0
"""A rollout passes when its reward reaches this (the checklist's full marks)."""


def _check(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise InvalidRequest(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")


def pass_at_k(n: int, c: int, k: int) -> float:
    _check(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


def suite_pass_rates(rewards_by_task: Mapping[str, Sequence[float]], ks: Sequence[int] | None = None) -> dict[str, float]:
    """``pass@k`` and ``pass^k`` (k = 1 .. the smallest n, or ``ks``) averaged over the tasks."""
    if not rewards_by_task:
        return {}
    counts = {task: (len(r), sum(1 for x in r if x >= PASS_THRESHOLD)) for task, r in rewards_by_task.items() if r}
    smallest = min(n for n, _ in counts.values())
    out: dict[str, float] = {}
    for k in ks or range(1, smallest + 1):
        if k > smallest:
            continue
        out[f"pass@{k}"] = sum(pass_at_k(n, c, k) for n, c in counts.values()) / len(counts)
        out[f"pass^{k}"] = sum(pass_hat_k(n, c, k) for n, c in counts.values()) / len(counts)
    return out


__all__ = ["PASS_THRESHOLD", "pass_at_k", "pass_hat_k", "suite_pass_rates"]
