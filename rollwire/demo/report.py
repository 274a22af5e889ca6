"""The demo's report: a reward-curve PNG, an HTML summary and the numbers as JSON, in the demo's folder.

The HTML shows the settings, the before/after table, the curve, and a few held-out trajectories as
the engine saw them, sampled tokens marked, read back from the store through ``reconstruct``.
"""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path
from typing import Any

from rollwire.demo.loop import DemoResult, PhaseResult


def summary(result: DemoResult) -> dict[str, Any]:
    """The numbers, as the report and the CLI print them."""

    def phase(p: PhaseResult | None) -> dict[str, Any] | None:
        if p is None:
            return None
        return {"run_id": p.run_id, "rollouts": len(p.rewards), "failed": p.failed, "mean_reward": round(p.mean, 4),
                "policy_version": p.policy_version, "seconds": round(p.seconds, 1)}  # fmt: skip

    return {
        "config": dataclasses.asdict(result.config),
        "store": result.stack.db_url,
        "teacher": phase(result.teacher),
        "before_rl": phase(result.before),
        "after_rl": phase(result.after),
        "gain": round(result.gain, 4),
        "iterations": [phase(p) for p in result.iterations],
        "seconds": round(result.seconds, 1),
    }


def reward_curve(result: DemoResult, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    xs = list(range(1, len(result.iterations) + 1))
    ax.plot(xs, [p.mean for p in result.iterations], marker="o", label="train rollouts (GRPO iteration)")
    for phase, x, color in ((result.before, 0, "tab:red"), (result.after, len(xs) + 1, "tab:green")):
        if phase is not None:
            ax.scatter(
                [x], [phase.mean], color=color, s=60, zorder=3, label=f"held-out, {phase.name} ({phase.mean:.2f})"
            )
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("GRPO iteration (0: after SFT, before RL)")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"rollwire demo: {result.config.suite} suite, {result.config.harness} harness")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _trajectory_html(db_url: str, run_id: str, model_dir: Path | None, limit: int = 3) -> str:
    """A few rollouts of a run, each segment's tokens decoded one by one, sampled ones marked."""
    from sqlmodel import Session, select

    from rollwire.reconstruct import reconstruct
    from rollwire.store.db import open_engine
    from rollwire.store.schema import Rollout

    tokenizer = None
    if model_dir is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    engine = open_engine(db_url)
    parts = []
    with Session(engine) as session:
        rows = session.exec(select(Rollout).where(Rollout.run_id == run_id).order_by(Rollout.id)).all()[:limit]
    for row in rows:
        trajectory = reconstruct(engine, row.id)
        parts.append(f"<h3>{html.escape(row.id)} · task {html.escape(row.task_id or '')} · reward {row.reward}</h3>")
        for segment in trajectory.segments:
            pieces = []
            for token, mask in zip(segment.token_ids, segment.loss_mask, strict=True):
                text = tokenizer.decode([token], skip_special_tokens=False) if tokenizer else f"[{token}]"
                pieces.append(f"<mark>{html.escape(text)}</mark>" if mask else html.escape(text))
            parts.append(f"<pre class='tokens'>{''.join(pieces)}</pre>")
        parts.append(f"<p><code>rollwire traces --db {html.escape(db_url)} show {html.escape(row.id)}</code></p>")
    engine.dispose()
    return "\n".join(parts)


def _mean(phase: PhaseResult | None) -> str:
    return f"{phase.mean:.3f} over {len(phase.rewards)} rollouts" if phase else "-"


def write_report(result: DemoResult, model_dir: Path | None) -> dict[str, Path]:
    out = result.out_dir
    numbers = summary(result)
    (out / "results.json").write_text(json.dumps(numbers, indent=2))
    png = reward_curve(result, out / "reward_curve.png")
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{p['rollouts']}</td><td>{p['failed']}</td><td>{p['mean_reward']:.3f}</td>"
        f"<td>{p['policy_version']}</td><td>{p['run_id']}</td></tr>"
        for name, p in (
            ("held-out, before RL (SFT only)", numbers["before_rl"]),
            ("held-out, after RL", numbers["after_rl"]),
        )
        if p is not None
    )
    settings = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>" for k, v in numbers["config"].items()
    )
    samples = _trajectory_html(result.stack.db_url, result.after.run_id, model_dir) if result.after else ""
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>rollwire demo report</title>
<style>body{{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}
pre.tokens{{white-space:pre-wrap;background:#f6f6f6;padding:8px;font-size:12px}}mark{{background:#ffe08a}}</style></head><body>
<h1>rollwire demo</h1>
<p>Held-out mean reward went from <b>{_mean(result.before)}</b> (SFT only) to <b>{_mean(result.after)}</b> after {len(result.iterations)} GRPO iterations
(gain <b>{numbers["gain"]:+.3f}</b>), in {numbers["seconds"]:.0f} s. Store: <code>{html.escape(result.stack.db_url)}</code></p>
<h2>Before and after RL</h2><table><tr><th>phase</th><th>rollouts</th><th>failed</th><th>mean reward</th><th>policy version</th><th>run</th></tr>{rows}</table>
<h2>Reward curve</h2><img src="{png.name}" alt="reward curve">
<h2>Settings</h2><table>{settings}</table>
<h2>A few held-out trajectories after RL</h2><p>Tokens as the engine saw them; <mark>marked</mark> tokens were sampled (loss mask 1).</p>
{samples}
</body></html>"""
    (out / "report.html").write_text(page)
    return {"html": out / "report.html", "png": png, "json": out / "results.json"}


__all__ = ["reward_curve", "summary", "write_report"]
