"""Run the main job on the embedded default: start the local stack on this machine and show a round trip.

Today the stack is the bundled engine (tiny local model) behind the token-faithful proxy and its store.
The demo plays a two-turn conversation through the proxy with the official ``openai`` client, exactly as
a harness would, finishes the rollout, and prints the recorded trajectory: one segment whose sampled
tokens (loss mask 1) are the engine's own ids, with the second turn spliced onto the first.
"""

from __future__ import annotations

import argparse
from typing import Any

from rollwire.settings import Settings

HELP = "run the main job on the embedded default (local stack, tiny model, no GPU, no downloads)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", default="Write the word Paris to answer.txt.", help="first user message")
    parser.add_argument("--max-tokens", type=int, default=16, help="most tokens sampled per turn (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--db", default=None, help="store URL (default: SQLite in the rollwire home folder)")


def _admin(client: Any, method: str, path: str, **kwargs: Any) -> Any:
    response = client.request(method, path, **kwargs)
    response.raise_for_status()
    return response.json()


def _play(base_url: str, token: str, args: argparse.Namespace) -> list[str]:
    """Two turns, the assistant message carried back unchanged, as a harness does."""
    from openai import OpenAI

    llm = OpenAI(base_url=base_url, api_key=token)
    model = llm.models.list().data[0].id  # the served name, as a harness would discover it
    messages: list[dict[str, Any]] = [{"role": "user", "content": args.prompt}]
    answers = []
    for turn, follow_up in enumerate(("Thanks. Now say done.", None)):
        reply = llm.chat.completions.create(
            model=model, messages=messages, max_tokens=args.max_tokens, seed=args.seed + turn  # type: ignore[arg-type]
        )
        message = reply.choices[0].message
        answers.append(message.content or "")
        messages.append(message.model_dump(exclude_none=True))
        if follow_up:
            messages.append({"role": "user", "content": follow_up})
    return answers


def run(args: argparse.Namespace, settings: Settings) -> int:
    import httpx
    from rich.console import Console

    from rollwire.engine.app import create_app as create_engine
    from rollwire.proxy.app import create_app as create_proxy
    from rollwire.serving import ServerThread
    from rollwire.tiny_model import ensure_tiny_model
    from rollwire.trajectory import Trajectory

    console = Console()
    with console.status("building or loading the tiny local model"):
        model_dir = ensure_tiny_model(settings.home)
    store_url = args.db or settings.store_url()
    engine = ServerThread(create_engine(settings.engine.model_copy(update={"model": str(model_dir)}), settings.home))
    with console.status("starting the bundled engine"):
        engine.start()
    try:
        proxy_settings = settings.proxy.model_copy(update={"upstream": engine.url, "model": str(model_dir)})
        proxy_app = create_proxy(proxy_settings, store_url, settings.home)
        with ServerThread(proxy_app) as proxy, httpx.Client(base_url=proxy.url, timeout=60) as admin:
            headers = {"Authorization": f"Bearer {proxy_app.state.operator_key}"}
            console.print(f"[bold]engine[/] {engine.url}   [bold]proxy[/] {proxy.url}   [bold]store[/] {store_url}")
            run_row = _admin(admin, "POST", "/admin/v1/runs", json={"name": "demo", "kind": "adhoc"}, headers=headers)
            rollout = _admin(admin, "POST", f"/admin/v1/runs/{run_row['id']}/rollouts", json={"count": 1}, headers=headers)[0]
            console.print(f"[bold]rollout[/] {rollout['id']} at {rollout['base_url'].replace(rollout['token'], '<token>')}")
            for turn, answer in enumerate(_play(rollout["base_url"], rollout["token"], args), start=1):
                console.print(f"[bold]turn {turn}[/] the model answered {answer!r}")
            _admin(admin, "POST", f"/admin/v1/rollouts/{rollout['id']}/finish", json={"status": "finished", "reward": 0.0}, headers=headers)
            data = _admin(admin, "GET", f"/admin/v1/rollouts/{rollout['id']}/trajectory", headers=headers)
    finally:
        engine.stop()
    trajectory = Trajectory.from_dict(data)
    for n, segment in enumerate(trajectory.segments):
        console.print(
            f"[bold]segment {n}[/]: {len(segment.token_ids)} token ids, {segment.num_sampled} sampled by the engine "
            f"(policy versions {sorted(set(v for v in segment.policy_versions if v >= 0))}), calls {segment.call_ids}"
            + (f", new segment because {segment.break_reason}" if segment.break_reason else "")
        )
    console.print(f"see it token by token: rollwire traces --db {store_url} show {trajectory.rollout_id}")
    return 0
