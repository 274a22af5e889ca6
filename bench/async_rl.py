"""Lockstep against overlapped RL: the demo's setting with --max-lag 0, 1 and 2, same seed and tasks, side by side.

    python bench/async_rl.py [--lags 0 1 2] [--iterations 12] [--eval-group 8] [--out DIR]

Each lag runs the whole demo (teacher, SFT, evaluation, the RL loop, evaluation) in a stack of its own and keeps
every checkpoint. The RL loop's own figures come from its result: its wall time, when each update's weights were
pushed, the share of rollout-slot time no rollout ran (slots idle) and of the loop's time the trainer was not
stepping (trainer idle). Afterwards one more stack evaluates every kept version on the held-out split (each
version pushed, then ``--eval-group`` rollouts per held-out task, every token checked to carry that version), so
held-out reward is known as a function of wall time without evaluations disturbing the timed runs. Then:

- **time to R0**: the loop's time until it pushed the first version whose held-out reward reaches R0, the lockstep
  run's final held-out reward; the lockstep run's own time to R0 is the reference (ratio 1.0);
- **held-out at T0**: the held-out reward of the newest version each run had pushed when the lockstep run ended.

On a 2-core machine sampling and training share the cores, so what overlap gains is the trainer's and the push's
time hidden behind sampling (``docs/architecture.md``, "Continuous RL"). A held-out figure of 64 rollouts moves by
about +-0.05 between evaluations of one version; a "time to R0" that crosses it by that much is within noise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported in main(): the checkers' worker processes re-import this file as their __main__
    from rollwire.app.demo.loop import DemoResult


def quiet(phase: str, progress: object, detail: str = "") -> None:
    if progress is None and not detail:
        print(f"  {time.strftime('%H:%M:%S')} {phase}", flush=True)


def run_lag(lag: int, args: argparse.Namespace, root: Path) -> tuple[DemoResult, Path]:
    from rollwire.app.demo.loop import Demo, DemoConfig
    from rollwire.settings import Settings

    out = root / f"lag{lag}"
    out.mkdir(parents=True, exist_ok=True)
    config = DemoConfig(max_lag=lag, iterations=args.iterations, eval_group=args.eval_group, seed=args.seed,
                        keep_checkpoints=args.iterations + 2)  # fmt: skip
    print(f"max lag {lag}: {out}", flush=True)
    return Demo(config, Settings(), out, quiet).run(), out / "checkpoints"


def evaluate_versions(runs: dict[int, tuple[DemoResult, Path]], args: argparse.Namespace, root: Path) -> dict[int, dict[int, float]]:
    """Held-out mean reward of every kept version of every run, in one stack of the tiny model."""
    import anyio
    import httpx

    from rollwire.app.demo.loop import DemoConfig
    from rollwire.app.rl.runner import Serving, local_stack
    from rollwire.orchestrator.suite_run import run_suite
    from rollwire.settings import Settings
    from rollwire.store.db import open_engine
    from rollwire.trainer.checkpoint import STATE_FILE
    from rollwire.trainer.weights import ProxyVersionPublisher, make_sinks

    out = root / "evaluations"
    out.mkdir(exist_ok=True)
    settings = Settings()
    options = DemoConfig().harness_options()
    curves: dict[int, dict[int, float]] = {}
    with local_stack(settings, out, Serving(), "tiny", args.seed) as info, httpx.Client(timeout=600) as client:
        sinks = make_sinks(info.engine_url or "", "", "", client)
        publisher = ProxyVersionPublisher(info.admin_url, info.operator_key, client)
        engine = open_engine(info.db_url)
        serial = 0
        for lag, (_result, folder) in runs.items():
            curves[lag] = {}
            for checkpoint in sorted(folder.glob("step-*")):
                version = int(json.loads((checkpoint / STATE_FILE).read_text())["policy_version"])
                serial += 1  # the stack's own version counter, so each push is new to the engine
                for sink in sinks:
                    sink.push(checkpoint, serial)
                publisher.publish(serial)
                outcome = anyio.run(lambda: run_suite(
                    info, suite="tiny", harness="reference", group_size=args.eval_group, split="held_out",
                    concurrency=8, harness_options=options, policy_version=serial, settings=settings,
                    run_id=f"lag{lag}-v{version}",
                ))  # fmt: skip
                seen = _versions(engine, outcome.run_id)
                if seen != {serial}:
                    raise SystemExit(f"evaluation of lag {lag} v{version} sampled versions {seen}, not only {serial}")
                rewards = [float(r.reward or 0.0) if r.status == "finished" else 0.0 for r in outcome.rollouts]
                curves[lag][version] = sum(rewards) / len(rewards)
                print(f"  lag {lag} v{version}: held-out {curves[lag][version]:.3f}", flush=True)
    return curves


def _versions(engine: Any, run_id: str) -> set[int]:
    from sqlalchemy import text

    query = text("select distinct m.policy_version from modelcall m join rollout r on m.rollout_id = r.id where r.run_id = :r")
    with engine.connect() as conn:
        return {int(row[0]) for row in conn.execute(query, {"r": run_id})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lags", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--eval-group", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if 0 not in args.lags:
        parser.error("--lags must include 0: the lockstep run is the reference")
    root = args.out or Path(tempfile.mkdtemp(prefix="async-rl-"))
    runs = {lag: run_lag(lag, args, root) for lag in args.lags}
    curves = evaluate_versions(runs, args, root)
    rows = table(runs, curves)
    (root / "async_rl.json").write_text(json.dumps(rows, indent=2))
    print_table(rows)
    print(f"(runs, checkpoints and evaluations in {root})")
    return 0


def table(runs: dict[int, tuple[DemoResult, Path]], curves: dict[int, dict[int, float]]) -> list[dict[str, Any]]:
    def pushed(result: DemoResult) -> list[tuple[float, int]]:
        assert result.rl is not None
        return [(0.0, result.rl.start_version)] + [(step.at_s, step.version) for step in result.rl.steps]

    lock, _ = runs[0]
    assert lock.rl is not None
    final = max(v for _, v in pushed(lock))
    r0, t0 = curves[0][final], lock.rl.seconds

    def time_to(lag: int) -> float | None:
        return next((at for at, v in pushed(runs[lag][0]) if curves[lag].get(v, -1.0) >= r0), None)

    reference = time_to(0)
    rows = []
    for lag, (result, _) in runs.items():
        rl = result.rl
        assert rl is not None
        reached = time_to(lag)
        at_t0 = max((v for at, v in pushed(result) if at <= t0), default=rl.start_version)
        rows.append({
            "max_lag": lag,
            "loop_s": round(rl.seconds, 1),
            "loop_ratio": round(rl.seconds / t0, 3),
            "time_to_r0_s": None if reached is None else round(reached, 1),
            "time_to_r0_ratio": None if reached is None or not reference else round(reached / reference, 3),
            "held_out_at_t0": round(curves[lag].get(at_t0, float("nan")), 3),
            "held_out_final": round(curves[lag][max(curves[lag])], 3),
            "slots_idle": round(rl.slots_idle_share, 3),
            "trainer_idle": round(1 - rl.trainer_busy_s / rl.seconds, 3) if rl.seconds else None,
            "zero_variance_share": round(rl.zero_variance_share, 3),
            "max_policy_lag": max((s.max_lag for s in rl.steps), default=0),
            "r0": round(r0, 3),
            "curve": {str(v): round(r, 3) for v, r in sorted(curves[lag].items())},
            "pushed_at_s": {str(v): round(at, 1) for at, v in pushed(result)},
            "config": dataclasses.asdict(result.config),
        })  # fmt: skip
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"\nR0 = lockstep's final held-out reward = {rows[0]['r0']:.3f}; T0 = lockstep's loop time = {rows[0]['loop_s']:.0f} s")
    head = ("max lag", "loop x T0", "time to R0 (x lockstep)", "held-out at T0", "held-out final", "slots idle",
            "trainer idle", "no-spread groups", "max lag seen")  # fmt: skip
    print(" | ".join(head))
    for r in rows:
        reached = "not reached" if r["time_to_r0_ratio"] is None else f"{r['time_to_r0_s']:.0f} s ({r['time_to_r0_ratio']:.2f})"
        print(" | ".join((
            str(r["max_lag"]), f"{r['loop_ratio']:.2f}", reached, f"{r['held_out_at_t0']:.3f}", f"{r['held_out_final']:.3f}",
            f"{r['slots_idle']:.0%}", f"{r['trainer_idle']:.0%}", f"{r['zero_variance_share']:.0%}", str(r["max_policy_lag"]),
        )))  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
