"""Serve the token-faithful proxy: OpenAI Chat Completions on /r/<token>/v1 (or a Bearer token on /v1) in front
of a vLLM-compatible engine, recording every call's exact prompt and sampled token ids in the trace store.
On a second port (--admin-port, default the next one), which no rollout should be able to reach: the operator
API under /admin/v1 (runs, rollouts, rewards, traces, the trajectory stream), the trace viewer (/ui) and /metrics.

At start it creates an ad-hoc run with one rollout and prints its ready base URL, and the operator key when it
made one up. Give the key through ROLLWIRE_PROXY__OPERATOR_KEY rather than --operator-key: a command line is
readable by every local user.
"""

from __future__ import annotations

import argparse

from rollwire.app.cli.listen_args import add_fd_argument
from rollwire.errors import InvalidRequest
from rollwire.proxy.cache_salt import SCOPES
from rollwire.settings import ProxySettings, Settings

HELP = "serve the token-faithful OpenAI-compatible proxy in front of an engine"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    fields = ProxySettings.model_fields
    parser.add_argument("--host", default=None, help=f"{fields['host'].description} (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help=f"{fields['port'].description} (default 8000)")
    add_fd_argument(parser)
    parser.add_argument("--admin-host", default=None, help=fields["admin_host"].description)
    parser.add_argument("--admin-port", type=int, default=None, help=fields["admin_port"].description)
    parser.add_argument(
        "--admin-fd", type=int, default=None, metavar="N",
        help="serve the admin listener on the listening socket inherited as file descriptor N (like --fd)",
    )  # fmt: skip
    parser.add_argument("--upstream", default=None, metavar="URL", help=fields["upstream"].description)
    parser.add_argument("--model", default=None, metavar="PATH", help=fields["model"].description)
    parser.add_argument("--gateway-url", default=None, metavar="URL", help=fields["gateway_url"].description)
    parser.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="SQLAlchemy URL of the trace store (default SQLite in the home folder)",
    )
    parser.add_argument(
        "--operator-key", default=None,
        help="key for /admin and /ui; prefer ROLLWIRE_PROXY__OPERATOR_KEY (a command line is visible to every local "
        "user); default: a random one, printed at start",
    )  # fmt: skip
    parser.add_argument(
        "--splice-policy", default=None, choices=["splice", "render"], help=fields["splice_policy"].description
    )
    parser.add_argument(
        "--prefix-cache-scope", default=None, choices=SCOPES, help=f"{fields['prefix_cache_scope'].description} "
        "(default rollout)",
    )  # fmt: skip
    parser.add_argument("--tool-parser", default=None, help=fields["tool_parser"].description)
    parser.add_argument("--reasoning-parser", default=None, help=fields["reasoning_parser"].description)
    parser.add_argument(
        "--strict-models",
        action="store_true",
        default=None,
        help="refuse (404) a model name the upstream does not serve and no alias maps; by default any name is "
        "answered while the upstream serves one model (the requested name is recorded on each call)",
    )
    parser.add_argument(
        "--no-adhoc-run", dest="adhoc_run", action="store_false",
        help="record no ad-hoc run with one rollout at start (a stack whose rollouts all come from its orchestrator: "
        "`rollwire rl`, the demo); by default one is made and its base URL printed, for a harness pointed by hand",
    )  # fmt: skip
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help=f"{fields['workers'].description} (default 1)",
    )
    parser.add_argument(
        "--upstream-timeout",
        type=float,
        default=None,
        dest="upstream_timeout_s",
        help=fields["upstream_timeout_s"].description,
    )


def _proxy_settings(args: argparse.Namespace, settings: Settings) -> ProxySettings:
    names = (
        "host",
        "port",
        "admin_host",
        "admin_port",
        "upstream",
        "model",
        "operator_key",
        "splice_policy",
        "prefix_cache_scope",
        "tool_parser",
        "reasoning_parser",
        "upstream_timeout_s",
        "gateway_url",
        "strict_models",
        "workers",
    )
    return settings.proxy.model_copy(update={n: getattr(args, n) for n in names if getattr(args, n) is not None})


def admin_address(proxy: ProxySettings) -> tuple[str, int]:
    """Where the admin listener binds: ``admin_host``/``admin_port``, by default the proxy's host and next port."""
    return proxy.admin_host or proxy.host, proxy.port + 1 if proxy.admin_port is None else proxy.admin_port


def run(args: argparse.Namespace, settings: Settings) -> int:
    proxy = _proxy_settings(args, settings)
    if not 0 < proxy.port < 65536:
        raise InvalidRequest("--port must be in 1..65535")
    admin_host, admin_port = admin_address(proxy)
    if not 0 < admin_port < 65536:
        raise InvalidRequest("--admin-port must be in 1..65535 (by default it is --port + 1)")
    if admin_port == proxy.port:
        raise InvalidRequest("--admin-port must differ from --port: rollouts reach --port, never the admin listener")
    if not 1 <= proxy.workers <= 256:
        raise InvalidRequest("--workers must be in 1..256")
    if proxy.workers > 1 and not proxy.shared_store:
        raise InvalidRequest("--workers above 1 needs shared_store (the workers share one store)")
    if proxy.model:  # a name is built (once) here; a folder must exist (it gives the tokenizer and chat template)
        from rollwire.model_names import resolve_model

        proxy = proxy.model_copy(update={"model": str(resolve_model(proxy.model, settings.home))})
    if not proxy.upstream.startswith(("http://", "https://")):
        raise InvalidRequest(f"--upstream must be an http(s) URL, got {proxy.upstream!r}")
    store_url = args.db or settings.store_url()
    import secrets

    from rollwire.app.serving import listening_socket, serve
    from rollwire.proxy.admin import create_rollouts, create_run
    from rollwire.proxy.app import ProxyApp, create_app
    from rollwire.store import open_engine

    key = proxy.operator_key or secrets.token_urlsafe(24)
    app = create_app(proxy, store_url, settings.home, operator_key=key)
    # bound before any run is recorded (a taken port leaves nothing behind) and before the URL is printed
    sock = listening_socket(proxy.host, proxy.port, args.fd, reuse_port=proxy.workers > 1)
    try:
        admin = listening_socket(admin_host, admin_port, args.admin_fd)
    except BaseException:
        sock.close()
        raise
    base = f"http://{proxy.host}:{proxy.port}"
    print(f"rollwire proxy: serving rollouts on {base} in front of {proxy.upstream}", flush=True)
    print(f"  admin listener (/admin/v1, /ui, /metrics): http://{admin_host}:{admin_port}", flush=True)
    if args.adhoc_run:
        engine = open_engine(store_url)
        run_row = create_run(engine, {"name": "adhoc", "kind": "adhoc"})
        rollout = create_rollouts(engine, run_row.id, {"count": 1}, base, proxy.gateway_url)[0]
        engine.dispose()
        print(f"  base URL (ad-hoc run {run_row.id}, rollout {rollout['id']}): {rollout['base_url']}", flush=True)
    if not proxy.operator_key:  # one it made up: nobody else knows it (a given key is not echoed into logs)
        print(f"  operator key: {key}", flush=True)
    if proxy.workers > 1:
        print(f"  workers: {proxy.workers}", flush=True)

    from rollwire.app.cli.workers import run_workers

    return run_workers(lambda listener: serve(app, listener, extra={ProxyApp.ADMIN: admin}), proxy.workers, sock)
