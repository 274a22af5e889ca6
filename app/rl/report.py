"""``rollwire report RUN``: an RL run's curves and tables from its store alone (no log or results file needed),
drawn from ``rollwire.run_figures`` (the trace viewer's run page reads the same figures). Where other runs in the
store ran the same suite with another harness, one table compares pass@k per harness.
"""

from __future__ import annotations

import html
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollwire.rollouts import RolloutBook
from rollwire.run_figures import RunFigures, figures, harness_table


def _plot_versions(found: RunFigures, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    train = sorted(found.train_by_version.items())
    ax.plot([v for v, _ in train], [sum(r) / len(r) for _, r in train], marker="o", label="train reward (drawn at)")
    rates = found.eval_rates()
    if rates:
        ax.plot(list(rates), [r.get("pass@1", 0.0) for r in rates.values()], marker="s", label="held-out pass@1")
    return save_reward_figure(fig, ax, "policy version", "reward / pass rate",
                              f"{found.run_id}: {found.suite} suite, {found.harness} harness", path)  # fmt: skip


def save_reward_figure(fig: Any, ax: Any, xlabel: str, ylabel: str, title: str, path: Path) -> Path:
    """The finish every reward curve shares (axes in [0, 1], grid, legend), written to ``path`` as a PNG."""
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _plot_draws(found: RunFigures, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = Counter(d["task_id"] for d in found.draws)
    tasks = sorted(counts, key=lambda t: (-counts[t], t))
    fig, ax = plt.subplots(figsize=(7, max(2.5, 0.18 * len(tasks))), dpi=110)
    ax.barh(tasks[::-1], [counts[t] for t in tasks[::-1]])
    ax.set_xlabel("groups drawn")
    ax.set_title("the curriculum's draws per task")
    ax.tick_params(axis="y", labelsize=6)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write(book: RolloutBook, run_id: str, out: Path, all_runs: Sequence[str]) -> dict[str, Path]:
    """``report.html``, ``versions.png`` and ``draws.png`` of ``run_id`` in ``out``."""
    found = figures(book, run_id)
    out.mkdir(parents=True, exist_ok=True)
    curve = _plot_versions(found, out / "versions.png")
    draws = _plot_draws(found, out / "draws.png")
    rates = found.eval_rates()
    ks = sorted({key for r in rates.values() for key in r}, key=lambda k: (k[4:], k[:4]))
    eval_rows = "".join(
        f"<tr><td>{v}</td>" + "".join(f"<td>{r.get(k, 0.0):.3f}</td>" for k in ks) + "</tr>" for v, r in rates.items()
    )
    tasks = "".join(
        f"<tr><td>{html.escape(t)}</td><td>{len(r)}</td><td>{sum(1 for x in r if x >= 1.0) / len(r):.2f}</td>"
        f"<td>{sum(r) / len(r):.3f}</td></tr>"
        for t, r in sorted(found.train_by_task.items())
    )
    by_task: dict[str, list[float]] = defaultdict(list)
    for d in found.draws:
        by_task[d["task_id"]].append(float(d["weight"]))
    harnesses = harness_table(book, all_runs, found.suite)
    hks = sorted({key for *_, r in harnesses for key in r}, key=lambda k: (k[4:], k[:4]))
    harness_rows = "".join(
        f"<tr><td>{html.escape(h)}</td><td>{html.escape(r)}</td><td>{v}</td>"
        + "".join(f"<td>{rates_.get(k, 0.0):.3f}</td>" for k in hks) + "</tr>"
        for h, r, v, rates_ in harnesses
    )  # fmt: skip
    faults = "".join(
        f"<tr><td>{html.escape(reason)}</td><td>{f.attempts}</td><td>{f.retried}</td></tr>"
        for reason, f in sorted(found.faults.items(), key=lambda item: item[1].first_ns)
    ) or '<tr><td colspan="3">none: the platform failed no rollout of this run</td></tr>'
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>rollwire report {html.escape(run_id)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}</style></head><body>
<h1>{html.escape(run_id)}</h1><p>{html.escape(found.suite)} suite, {html.escape(found.harness)} harness;
{len(found.draws)} groups drawn, {sum(len(r) for r in found.train_by_version.values())} train rollouts,
{len(rates)} evaluated versions.</p>
<h2>Across policy versions</h2><img src="{curve.name}" alt="train reward and held-out pass@1 per version">
<h2>Held-out evaluations</h2><table><tr><th>version</th>{"".join(f"<th>{k}</th>" for k in ks)}</tr>{eval_rows}</table>
<h2>Train tasks</h2><table><tr><th>task</th><th>rollouts</th><th>pass rate</th><th>mean reward</th></tr>{tasks}</table>
<h2>The curriculum's draws</h2><img src="{draws.name}" alt="draws per task">
<h2>Faults met</h2><p>Rollouts the platform failed (a part down, a workload lost), classed by the scheduler on its
own evidence: they train nothing, and each is retried while attempts remain.</p>
<table><tr><th>reason</th><th>attempts failed</th><th>retried</th></tr>{faults}</table>
<h2>Harnesses on this suite</h2><table><tr><th>harness</th><th>run</th><th>version</th>{"".join(f"<th>{k}</th>" for k in hks)}</tr>{harness_rows}</table>
</body></html>"""
    (out / "report.html").write_text(page)
    return {"html": out / "report.html", "versions": curve, "draws": draws}


__all__ = ["save_reward_figure", "write"]
