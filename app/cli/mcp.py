"""MCP task environments and the recording gateway. `serve [NAME|all] [--transport http|stdio]` runs the env
servers (workspace, sqldb, calendar, mail; over HTTP all in one process at /<name>/mcp, plus /health);
`gateway` serves MCP at /r/<token>/mcp for the rollouts in the store and records every tool call;
`suites [NAME]` lists the shipped task suites, or the tasks of one; `bridge -- COMMAND` serves a stdio MCP
server over streamable HTTP behind a rollout's key (a sidecar in the rollout's pod)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TypeVar

from rollwire.app.cli.listen_args import add_fd_argument
from rollwire.errors import InvalidRequest
from rollwire.settings import GatewaySettings, McpSettings, Settings

_Section = TypeVar("_Section", McpSettings, GatewaySettings)

logger = logging.getLogger(__name__)
HELP = "MCP env servers (workspace, sqldb, calendar, mail), the recording gateway, task suites, the sidecar bridge"
BRIDGE_ABOUT = (
    "Serve one stdio MCP server (e.g. npm's @modelcontextprotocol/server-memory) over streamable HTTP, as a "
    "sidecar in a rollout's pod that the gateway reaches, or with --shared NAME as one server the gateway calls for "
    "every rollout. The bridge starts the server once and initializes it itself, so every client session (one "
    "after another or at once) reaches the same process and state. Every request at --path must carry "
    "'Authorization: Bearer <key>': the rollout's key read from the --key-env variable, or with --shared the key "
    "derived from the deployment's sidecar secret held there and NAME. The harness in the same pod can reach the "
    "port but does not hold the key, and neither does the server: the variable is removed from its environment "
    "and the bridge's, and the bridge is made non-dumpable (Linux) before the server starts, so that a process of "
    "its uid cannot read it from /proc. A keyed request with 'X-Rollwire-Nonce: <1-128 visible ASCII characters>' "
    "gets 'X-Rollwire-Proof: <HMAC of the nonce under the key>' on every response, so a process that took the port "
    "after the bridge stopped cannot pass for it. With --shared the server is told the bridge has no client "
    "capabilities, its requests are answered with an error, and only a request's own progress notifications are "
    "relayed (nothing of one rollout's reaches another). GET /ready (no key) answers 200 once the server has "
    "answered initialize and while it runs. It prints 'bridge ready on http://HOST:PORT/PATH' on stdout when ready; "
    "a server that does not start or later exits stops it with status 1 and one line saying why; SIGTERM stops the "
    "server and exits 0."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)
    env = McpSettings.model_fields
    serve = sub.add_parser("serve", help="serve env servers over streamable HTTP or stdio")
    serve.add_argument("name", nargs="?", default="all", help="workspace, sqldb, calendar, mail or all (HTTP only)")
    serve.add_argument("--transport", choices=["http", "stdio"], default="http")
    serve.add_argument("--host", default=None, help=f"{env['host'].description} (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help=f"{env['port'].description} (default 8200)")
    add_fd_argument(serve)
    serve.add_argument("--state-dir", default=None, help=env["state_dir"].description)
    serve.add_argument("--rollout", default=None, dest="stdio_rollout", help=env["stdio_rollout"].description)
    serve.add_argument("--task", default=None, dest="stdio_task", help=env["stdio_task"].description)
    gw = GatewaySettings.model_fields
    gateway = sub.add_parser("gateway", help="serve the recording MCP gateway at /r/<token>/mcp")
    gateway.add_argument("--host", default=None, help=f"{gw['host'].description} (default 127.0.0.1)")
    gateway.add_argument("--port", type=int, default=None, help=f"{gw['port'].description} (default 8300)")
    add_fd_argument(gateway)
    gateway.add_argument("--env-url", default=None, help=gw["env_url"].description)
    gateway.add_argument(
        "--mcp-config", "--upstreams", default=None, dest="upstreams_file", metavar="FILE", help=gw["upstreams_file"].description
    )
    gateway.add_argument("--rollouts-dir", default=None, dest="rollouts_dir", help=gw["rollouts_dir"].description)
    gateway.add_argument("--max-tool-calls", type=int, default=None, help=gw["max_tool_calls"].description)
    gateway.add_argument(
        "--call-timeout", type=float, default=None, dest="call_timeout_s", help=gw["call_timeout_s"].description
    )
    gateway.add_argument("--db", default=None, metavar="URL", help="SQLAlchemy URL of the trace store (default: home)")
    suites = sub.add_parser("suites", help="list the shipped task suites, or the tasks of one (name or JSON path)")
    suites.add_argument("name", nargs="?", default=None)
    bridge = sub.add_parser(
        "bridge", help="serve a stdio MCP server over streamable HTTP behind a rollout's key (pod sidecar)",
        description=BRIDGE_ABOUT, usage="%(prog)s [options] -- COMMAND [ARGS...]",
    )  # fmt: skip
    bridge.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0: the pod's)")
    bridge.add_argument("--port", type=int, default=8400, help="port to listen on, 0 for any free one (default 8400)")
    bridge.add_argument("--path", default="/mcp", help="where MCP is served (default /mcp)")
    bridge.add_argument(
        "--key-env", default="ROLLWIRE_MCP_SIDECAR_KEY", metavar="NAME",
        help="environment variable holding the rollout's key, or with --shared the deployment's sidecar secret "
        "(default ROLLWIRE_MCP_SIDECAR_KEY); required",
    )  # fmt: skip
    bridge.add_argument(
        "--shared", default=None, metavar="NAME",
        help="serve every rollout as the deployment's shared server NAME (its mcpServers name): answer the key "
        "derived from the secret and NAME, relay no server request and no notification but a request's progress",
    )  # fmt: skip
    bridge.add_argument("--cwd", default=None, metavar="DIR", help="the server's working folder (default: this one)")
    bridge.add_argument(
        "--startup-timeout", type=float, default=60.0, metavar="SECONDS",
        help="how long the server may take to answer initialize (default 60)",
    )  # fmt: skip
    bridge.add_argument("server_command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")


def _pick(model: _Section, args: argparse.Namespace, names: tuple[str, ...]) -> _Section:
    return model.model_copy(update={n: getattr(args, n) for n in names if getattr(args, n, None) is not None})


def _check_port(port: int) -> None:
    if not 0 < port < 65536:
        raise InvalidRequest("--port must be in 1..65535")


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import anyio

    from rollwire.app.serving import listening_socket, serve
    from rollwire.mcp_servers.envs.app import SERVERS, build_app, build_server, runtime
    from rollwire.mcp_servers.tasks.loader import load_suite, task_initial

    mcp = _pick(settings.mcp, args, ("host", "port", "state_dir", "stdio_rollout", "stdio_task"))
    for suite in mcp.suites:  # task references may name these files (and the shipped suites), nothing else
        load_suite(suite)
    names = list(SERVERS) if args.name == "all" else [args.name]
    env = runtime(mcp, settings.home, task_initial)
    if args.transport == "stdio":
        if len(names) != 1:
            raise InvalidRequest("stdio serves one server: name workspace, sqldb, calendar or mail")
        anyio.run(build_server(names[0], env).run_stdio_async)
        return 0
    _check_port(mcp.port)
    sock = listening_socket(mcp.host, mcp.port, args.fd)
    app = build_app(names, env, mcp.allowed_hosts, mcp.max_payload_bytes + 64_000, secret=mcp.env_secret)
    base = f"http://{mcp.host}:{mcp.port}"
    # a log line (stderr), so that with --log-format json it is a JSON object like every other line there
    logger.info("env servers: %s  state: %s", ", ".join(f"{base}/{n}/mcp" for n in names), env.store.root)
    return serve(app, sock, lifespan="auto")


def _gateway(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.app.serving import listening_socket, serve
    from rollwire.mcp_servers.gateway.server import build_gateway_app
    from rollwire.mcp_servers.server_config import load_upstreams
    from rollwire.store.db import open_engine

    gw = _pick(
        settings.mcp.gateway, args, ("host", "port", "env_url", "upstreams_file", "rollouts_dir", "max_tool_calls", "call_timeout_s")
    )
    _check_port(gw.port)
    if len(gw.env_secret) < 16:
        raise InvalidRequest(
            "the gateway needs the env servers' shared secret (16+ characters): set ROLLWIRE_MCP__GATEWAY__ENV_SECRET "
            "to the env servers' ROLLWIRE_MCP__ENV_SECRET"
        )
    extra = load_upstreams(gw.upstreams_file)
    sidecars = None
    if gw.runtime == "kubernetes":  # the file's servers run where their scope puts them; the gateway starts none
        from rollwire.mcp_servers.gateway.cluster_routes import kubernetes_routes
        from rollwire.orchestrator.runtimes.kubernetes.api import api_client_from_settings

        kube = settings.orchestrator.kubernetes
        extra, sidecars = kubernetes_routes(extra, kube, gw.sidecar_secret, lambda: api_client_from_settings(kube))
    sock = listening_socket(gw.host, gw.port, args.fd)
    app = build_gateway_app(gw, open_engine(args.db or settings.store_url()), extra, sidecars)
    logger.info(
        "gateway: http://%s:%s/r/<token>/mcp  (env servers at %s; third-party MCP servers: %s)",
        gw.host, gw.port, gw.env_url, ", ".join(extra) or "none",
    )  # fmt: skip
    return serve(app, sock, lifespan="auto")


def _suites(args: argparse.Namespace) -> int:
    from rollwire.mcp_servers.tasks.loader import load_suite, suite_names

    if args.name is None:
        for name in suite_names():
            suite = load_suite(name)
            print(
                f"{name:10} {len(suite.split('train')):4} train {len(suite.split('held_out')):4} held-out  {suite.description}"
            )
        return 0
    suite = load_suite(args.name)  # checks that every server a task names is known
    for name, spec in sorted(suite.mcp_servers.items()):
        how = spec.get("url") or " ".join([spec.get("command", ""), *spec.get("args", [])])
        print(f"server {name}: {how}")
    for task in suite.tasks:
        print(f"{task.id:24} {task.split:8} {','.join(task.servers):22} {task.instruction}")
    return 0


def _bridge(args: argparse.Namespace) -> int:
    command = args.server_command[1:] if args.server_command[:1] == ["--"] else args.server_command
    key = os.environ.get(args.key_env, "").strip()
    holds = "the deployment's sidecar secret" if args.shared is not None else "the rollout's key"
    refusal = (
        "name the stdio server's command after --, e.g. rollwire mcp bridge -- mcp-server-memory" if not command
        else f"the key is missing: set {args.key_env} to {holds} (the bridge never serves without one)"
        if not key else "--shared needs the server's name" if args.shared is not None and not args.shared.strip()
        else "--path must start with /" if not args.path.startswith("/")
        else "--port must be in 0..65535" if not 0 <= args.port < 65536 else None
    )  # fmt: skip
    if refusal is not None:
        print(f"rollwire mcp bridge: {refusal}", file=sys.stderr)
        return 2

    from rollwire.app.serving import listening_socket, uvicorn_config
    from rollwire.mcp_servers.bridge import Bridge, seal, server_parameters
    from rollwire.mcp_servers.placement import sidecar_key

    try:
        seal(args.key_env)  # before the server starts: it runs as this uid
    except OSError as exc:
        print(f"rollwire mcp bridge: cannot keep the key from the server: {exc.strerror}", file=sys.stderr)
        return 2
    shared = args.shared is not None
    key = sidecar_key(key, "shared", args.shared) if shared else key
    params = server_parameters(command, args.cwd, args.key_env)
    bridge = Bridge(params, key, args.path, args.startup_timeout, shared=shared)
    sock = listening_socket(args.host, args.port)
    failure = bridge.run(sock, uvicorn_config(bridge.app, lifespan="off", timeout_graceful_shutdown=2))
    if failure is not None:
        print(f"rollwire mcp bridge: {failure}", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.mcp_command == "serve":
        return _serve(args, settings)
    if args.mcp_command == "gateway":
        return _gateway(args, settings)
    if args.mcp_command == "bridge":
        return _bridge(args)
    return _suites(args)


__all__ = ["HELP", "add_arguments", "run"]
