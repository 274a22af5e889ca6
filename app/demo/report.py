"""The demo's report: a reward-curve PNG, an HTML summary and the numbers as JSON, in the demo's folder.

The HTML says what the reward measures, shows the before/after table, the curve, the settings in words,
and per held-out task the best and the worst trajectory after RL as the engine saw them (sampled tokens
marked, the prompt they all share shown once), read back from the store through ``reconstruct``.
"""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path
from typing import Any

from rollwire.app.demo.loop import DemoConfig, DemoResult, PhaseResult
from rollwire.app.rl.report import save_reward_figure


def summary(result: DemoResult) -> dict[str, Any]:
    """The numbers, as the report and the CLI print them."""

    def phase(p: PhaseResult | None) -> dict[str, Any] | None:
        if p is None:
            return None
        return {"run_id": p.run_id, "groups": p.group_prefix + "*", "rollouts": len(p.rewards), "failed": p.failed, "mean_reward": round(p.mean, 4),
                "policy_version": p.policy_version, "seconds": round(p.seconds, 1)}  # fmt: skip

    return {
        "config": dataclasses.asdict(result.config),
        "store": result.stack.db_url,
        "teacher": phase(result.teacher),
        "before_rl": phase(result.before),
        "after_rl": phase(result.after),
        "gain": round(result.gain, 4),
        "iterations": [phase(p) for p in result.iterations],
        "rl": rl_summary(result),
        "seconds": round(result.seconds, 1),
    }


def rl_summary(result: DemoResult) -> dict[str, Any] | None:
    """What the RL loop did besides its updates: draws, groups left out for no reward spread, lag, trainer time."""
    rl = result.rl
    if rl is None:
        return None
    half = len(rl.steps) // 2
    return {
        "run_id": rl.run_id,
        "groups_drawn": len(rl.draws),
        "groups_finished": rl.groups_finished,
        "groups_zero_variance": rl.groups_zero_variance,
        "zero_variance_share": round(rl.zero_variance_share, 4),
        "max_policy_lag": max((step.max_lag for step in rl.steps), default=0),
        "trainer_busy_share": round(rl.trainer_busy_s / rl.seconds, 4) if rl.seconds else 0.0,
        "mean_reward_first_half": round(_mean_of([r for step in rl.steps[:half] for r in step.rewards]), 4),
        "mean_reward_second_half": round(_mean_of([r for step in rl.steps[half:] for r in step.rewards]), 4),
        "seconds": round(rl.seconds, 1),
        "draws": [{"index": d.index, "task_id": d.task_id, "weight": round(d.weight, 4),
                   "probability": round(d.probability, 4)} for d in rl.draws],  # fmt: skip
    }


def _mean_of(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


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
    title = f"rollwire demo: {result.config.model or 'tiny'}, {result.config.suite} suite, {result.config.harness} harness"
    return save_reward_figure(fig, ax, "GRPO update (0: after SFT, before RL)", "mean reward", title, path)


def settings_in_words(c: DemoConfig) -> list[tuple[str, str]]:
    """The recipe as sentences (``results.json`` keeps the raw fields)."""

    def first(n: int, what: str) -> str:
        return f"all {what}" if n == 0 else f"the first {n} {what}"

    def capped(n: int) -> int:  # a count of train tasks, within the first ``train_tasks`` (0: no limit)
        return min(m for m in (n, c.train_tasks) if m) if n or c.train_tasks else 0

    teacher = capped(c.teacher_tasks)
    ahead = "lockstep: sampling waits for each update" if c.max_lag == 0 else (
        f"sampling runs up to {c.max_lag} update(s) ahead of training")
    dynamic = ("groups whose rewards all agree are left out and redrawn" if c.dynamic_sampling
               else "every group trains, equal rewards included")
    return [
        ("task suite", (f"{c.suite}; training on {first(c.train_tasks, 'train tasks')}, "
                       f"evaluating on {first(c.eval_tasks, 'held-out tasks')}")),
        ("harness", f"{c.harness}, each rollout {'a local process' if c.runtime == 'local' else 'a Kubernetes pod'}"),
        ("model", (f"{c.model or 'the tiny local model'}, served by "
                  f"{'vLLM at ' + c.upstream if c.upstream else 'the bundled CPU engine'}")),
        ("teacher data", f"{c.teacher_group} scripted-expert rollout(s) of each of {first(teacher, 'train tasks')}"),
        ("training", f"LoRA adapters of rank {c.lora_rank} (merged into each pushed checkpoint)" if c.lora_rank
                     else "every weight (full fine-tuning)"),
        ("SFT warm start", (f"{c.sft_epochs} passes over the teacher data, {c.sft_batch} trajectories per step, "
                           f"learning rate {c.sft_lr:g}")),
        ("GRPO", (f"{c.iterations} updates, each on {c.tasks_per_iteration} task groups of {c.group_size} rollouts drawn "
                 f"by learnability (p(1-p) of each task's recent pass rate); {dynamic}; {ahead}; "
                 f"{c.grpo_epochs} clipped pass(es) per update, learning rate {c.grpo_lr:g}, {c.aggregation} "
                 f"loss, {'a fresh' if c.fresh_optimizer else 'the SFT'} AdamW; advantages "
                 f"{'not scaled' if c.std_scale == 'none' else 'divided by the ' + c.std_scale + ' reward std'}, "
                 f"ratio clipped to [{1 - 0.2:g}, {1 + c.clip_high:g}]")),
        ("evaluation", f"{c.eval_group} rollouts per held-out task, before and after RL, same sampling"),
        ("sampling", (f"temperature {c.temperature:g}, at most {c.max_tokens} tokens per model call and "
                     f"{c.max_turns} model calls per rollout")),
        ("rollouts at once", f"{c.concurrency}, each stopped after {c.deadline_s:g} s"),
        ("seed", f"{c.seed} for the trainer and for sampling (each model call's seed derives from it and its prompt)"),
    ]  # fmt: skip


def reward_line(suite: str) -> str:
    """What the checker of the suite's held-out tasks rewards, and the most a rollout can earn."""
    from rollwire.mcp_servers.tasks.loader import load_suite

    tasks = load_suite(suite).tasks
    task = next((t for t in tasks if t.split == "held_out"), tasks[0])
    total = sum(c.weight for c in task.checker)
    checks = " + ".join(
        f"{c.weight / total:.2g} if {c.name or c.kind}({', '.join(f'{k}={v}' for k, v in c.args.items())})"
        for c in task.checker
    )
    line = f"Reward (task {task.id}): {checks}; 1.0 is the most a rollout earns."
    if len(task.checker) > 1:
        last = task.checker[-1]
        line += f" A rollout that passes every check but the last ({last.name or last.kind}) earns {(total - last.weight) / total:.2g}."
    return line


def _pick(rows: list[Any]) -> list[tuple[str, Any]]:
    """Per task: its best and its worst rollout (one when the task has one, or all scored alike)."""
    by_task: dict[str, list[Any]] = {}
    for row in rows:
        by_task.setdefault(row.task_id or "", []).append(row)
    picked = []
    for task in sorted(by_task):
        ranked = sorted(by_task[task], key=lambda r: (float(r.reward or 0.0) if r.status == "finished" else -1.0, r.id))
        best, worst = ranked[-1], ranked[0]
        picked.append(("best", best))
        if worst.id != best.id and (worst.reward, worst.status) != (best.reward, best.status):
            picked.append(("worst", worst))
    return picked


def _shared_prefix(sequences: list[list[int]]) -> int:
    if not sequences:
        return 0
    n = min(len(s) for s in sequences)
    for i in range(n):
        if any(s[i] != sequences[0][i] for s in sequences):
            return i
    return n


def _trajectory_html(db_url: str, phase: PhaseResult, model_dir: Path | None) -> str:
    """The best and worst rollout of every task of a phase, tokens decoded one by one, sampled ones marked."""
    from sqlmodel import Session, select

    from rollwire.reconstruct import reconstruct
    from rollwire.store.db import open_engine
    from rollwire.store.schema import Rollout

    tokenizer = None
    if model_dir is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))

    def tokens(ids: list[int], mask: list[int]) -> str:
        pieces = []
        for token, sampled in zip(ids, mask, strict=True):
            text = tokenizer.decode([token], skip_special_tokens=False) if tokenizer else f"[{token}]"
            assert isinstance(text, str)  # one sequence of ids decodes to one string
            pieces.append(f"<mark>{html.escape(text)}</mark>" if sampled else html.escape(text))
        return "".join(pieces)

    engine = open_engine(db_url)
    with Session(engine) as session:
        rows = list(session.exec(select(Rollout).where(Rollout.run_id == phase.run_id)).all())
    rows = [row for row in rows if (row.group_id or "").startswith(phase.group_prefix)]
    shown = [(label, row, reconstruct(engine, row.id)) for label, row in _pick(rows)]
    engine.dispose()
    firsts = [t.segments[0] for _, _, t in shown if t.segments]
    shared = _shared_prefix([s.token_ids for s in firsts])
    parts = []
    if shared and len(shown) > 1:
        first = firsts[0]
        parts.append(f"<details><summary>the prompt every rollout below starts with ({shared} tokens)</summary>"
                     f"<pre class='tokens'>{tokens(first.token_ids[:shared], first.loss_mask[:shared])}</pre></details>")  # fmt: skip
    for label, row, trajectory in shown:
        reward = "-" if row.reward is None else f"{row.reward:g}"
        task, status = html.escape(row.task_id or ""), html.escape(str(row.status))
        parts.append(f"<h3>task {task} · {label} · reward {reward} · {status}</h3>")
        for n, segment in enumerate(trajectory.segments):
            skip = shared if n == 0 and len(shown) > 1 else 0
            lead = f"<span class='shared'>[the shared prompt, {skip} tokens]</span>" if skip else ""
            body = tokens(segment.token_ids[skip:], segment.loss_mask[skip:])
            parts.append(f"<pre class='tokens'>{lead}{body}</pre>")
        parts.append(f"<p><code>rollwire traces show {html.escape(row.id)} --db {html.escape(db_url)}</code></p>")
    return "\n".join(parts)


def _rl_html(rl: dict[str, Any] | None) -> str:
    if rl is None:
        return ""
    return (f"<h2>The RL loop</h2><p>{rl['groups_drawn']} task groups drawn, {rl['groups_finished']} finished; "
            f"{rl['groups_zero_variance']} ({rl['zero_variance_share']:.0%}) had no reward spread and were redrawn. "
            f"Largest policy lag trained on: {rl['max_policy_lag']} version(s). The trainer was busy "
            f"{rl['trainer_busy_share']:.0%} of the loop's {rl['seconds']:.0f} s.</p>")  # fmt: skip


def _mean(phase: PhaseResult | None) -> str:
    return f"{phase.mean:.3f} over {len(phase.rewards)} rollouts" if phase else "-"


def write_report(result: DemoResult, model_dir: Path | None) -> dict[str, Path]:
    out = result.out_dir
    numbers = summary(result)
    (out / "results.json").write_text(json.dumps(numbers, indent=2))
    png = reward_curve(result, out / "reward_curve.png")
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{p['rollouts']}</td><td>{p['failed']}</td><td>{p['mean_reward']:.3f}</td>"
        f"<td>{p['policy_version']}</td><td>{p['groups']}</td></tr>"
        for name, p in (
            ("held-out, before RL (SFT only)", numbers["before_rl"]),
            ("held-out, after RL", numbers["after_rl"]),
        )
        if p is not None
    )
    settings = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in settings_in_words(result.config)
    )
    samples = _trajectory_html(result.stack.db_url, result.after, model_dir) if result.after else ""
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>rollwire demo report</title>
<style>body{{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}
pre.tokens{{white-space:pre-wrap;background:#f6f6f6;padding:8px;font-size:12px}}mark{{background:#ffe08a}}.shared{{color:#888}}</style></head><body>
<h1>rollwire demo</h1>
<p>Held-out mean reward went from <b>{_mean(result.before)}</b> (SFT only) to <b>{_mean(result.after)}</b> after {len(result.iterations)} GRPO updates
(gain <b>{numbers["gain"]:+.3f}</b>), in {numbers["seconds"]:.0f} s. Store: <code>{html.escape(result.stack.db_url)}</code></p>
<p>{html.escape(reward_line(result.config.suite))}</p>
<h2>Before and after RL</h2><table><tr><th>phase</th><th>rollouts</th><th>failed</th><th>mean reward</th><th>policy version</th><th>groups</th></tr>{rows}</table>
<h2>Reward curve</h2><img src="{png.name}" alt="reward curve">
{_rl_html(numbers["rl"])}
<h2>Settings</h2><table>{settings}</table>
<h2>Held-out trajectories after RL: the best and the worst of each task</h2><p>Tokens as the engine saw them; <mark>marked</mark> tokens were sampled (loss mask 1).</p>
{samples}
</body></html>"""
    (out / "report.html").write_text(page)
    return {"html": out / "report.html", "png": png, "json": out / "results.json"}


__all__ = ["reward_curve", "reward_line", "settings_in_words", "summary", "write_report"]
