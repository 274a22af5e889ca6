"""The policy under training is an adversary of the proxy: a rollout reaches the proxy's port (the local sandbox
relays exactly the proxy's and the gateway's addresses; a rollout pod's NetworkPolicy admits exactly those), so
nothing on that port may lead to the operator API, the trace viewer or /metrics, whatever key it sends or however
it spells the path. On the admin listener, which no rollout is given, they answer with the operator key and refuse
(401) without it. The stack runs as ``rollwire up`` runs it (real child processes on loopback sockets), and none
of its children holds a secret on its command line, which every local user can read.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rollwire.app.serving import ServerThread
from rollwire.app.stack import LocalStack, StackInfo
from rollwire.settings import Settings

pytestmark = pytest.mark.slow

ENV_SECRET = "admin-reach-env-secret"
ADMIN_PATHS = [
    ("POST", "/admin/v1/runs"),
    ("POST", "/admin/v1/runs/{run}/rollouts"),
    ("GET", "/admin/v1/rollouts/{rollout}"),
    ("GET", "/admin/v1/rollouts/{rollout}/trajectory"),
    ("POST", "/admin/v1/rollouts/{rollout}/finish"),
    ("POST", "/admin/v1/rollouts/{rollout}/revoke"),
    ("POST", "/admin/v1/policy_version"),
    ("GET", "/admin/v1/policy_version"),
    ("GET", "/admin/v1/trajectories/stream?run={run}&wait=0"),
    ("GET", "/ui/"),
    ("GET", "/ui/static/app.js"),
    ("GET", "/ui/api/runs"),
    ("GET", "/ui/api/rollouts/{rollout}"),
    ("GET", "/metrics"),
]
"""Every kind of admin-listener route, with the method it answers."""
BODIES = {"/admin/v1/policy_version": b'{"version": 0}', "/admin/v1/rollouts/{rollout}/finish": b'{"reward": 1.0}'}
"""A valid body where ``{}`` is not one (so that "it answers" means 2xx)."""
SPELLINGS = [
    "/admin", "/admin/", "/ui", "//admin/v1/runs", "/%61dmin/v1/runs", "/admin%2Fv1%2Fruns", "/ADMIN/v1/runs",
    "/r/{token}/../admin/v1/runs", "/r/{token}/v1/../../../admin/v1/runs", "/v1/../admin/v1/runs", "/./ui/",
    "/r/{token}/admin/v1/runs", "/r/{token}/ui/", "/r/{token}/metrics",
]  # fmt: skip
"""Paths a rollout might try on the proxy's port hoping some layer normalises them into an admin route."""


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """An engine stand-in: the stack only needs its model list (the admin routes never call it)."""

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})

    with ServerThread(Starlette(routes=[Route("/v1/models", models)])) as server:
        yield server.url


@pytest.fixture(scope="module")
def stack(upstream: str, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    """The local stack as ``rollwire up`` starts it (env servers, gateway, proxy as child processes), in front of
    the stand-in engine, with the env servers' secret in this process's environment like a user's."""
    folder = tmp_path_factory.mktemp("admin-reach")
    settings = Settings()  # the session's home, where tiny_model_dir built the tokenizer the proxy loads
    stack = LocalStack(
        settings, upstream=upstream, db_url=f"sqlite:///{folder / 'store.db'}", state_dir=folder / "state",
        log_dir=folder / "logs",
    )  # fmt: skip
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ROLLWIRE_MCP__ENV_SECRET", ENV_SECRET)
        stack.env_secret = ENV_SECRET
        with stack as info:
            yield info


@pytest.fixture()
def rollout(stack: StackInfo) -> dict[str, Any]:
    """A fresh running rollout (a test may finish or revoke it)."""
    with httpx.Client(base_url=stack.admin_url, headers=stack.admin_headers(), timeout=30) as admin:
        run = admin.post("/admin/v1/runs", json={"name": "reach"})
        assert run.status_code == 201, run.text
        made = admin.post(f"/admin/v1/runs/{run.json()['id']}/rollouts", json={"count": 1})
        assert made.status_code == 201, made.text
    return {"run": run.json()["id"], **made.json()[0]}


def _path(template: str, rollout: dict[str, Any]) -> str:
    return template.format(run=rollout["run"], rollout=rollout["id"], token=rollout["token"])


def _with_query(path: str, query: str) -> str:
    return path + ("&" if "?" in path else "?") + query if query else path


def _key_variants(key: str) -> list[tuple[dict[str, str], str]]:
    """(headers, query) pairs: every way the admin API (the first two) or the viewer (all) takes the operator key."""
    return [
        ({"Authorization": f"Bearer {key}"}, ""),
        ({"x-api-key": key}, ""),
        ({"Cookie": f"rollwire_operator={key}"}, ""),
        ({}, f"key={key}"),
    ]


def _raw(url: str, method: str, path: str, headers: dict[str, str], body: bytes = b"{}") -> tuple[int, bytes]:
    """One request with its path sent byte for byte as given (no client-side normalisation of ``..`` or ``//``)."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request(method, path, body=body if method == "POST" else None,
                     headers={"Content-Type": "application/json", **headers})  # fmt: skip
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def test_the_admin_port_is_not_a_rollout_endpoint(stack: StackInfo, rollout: dict[str, Any]) -> None:
    """What rollouts are handed names the main listener only, and the main listener serves them."""
    admin, proxy, gateway = (urlsplit(u) for u in (stack.admin_url, stack.proxy_url, stack.gateway_url))
    assert admin.port not in (proxy.port, gateway.port)
    for link in ("base_url", "anthropic_base_url"):
        assert urlsplit(rollout[link]).port == proxy.port, rollout[link]
    assert str(admin.port) not in json.dumps(rollout)
    models = httpx.get(f"{rollout['base_url']}/models", headers={"Authorization": "Bearer x"}, timeout=30)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "m"


@pytest.mark.parametrize(("method", "template"), ADMIN_PATHS)
def test_the_main_port_answers_404_even_with_the_operator_key(
    stack: StackInfo, rollout: dict[str, Any], method: str, template: str
) -> None:
    path = _path(template, rollout)
    for headers, query in [({}, ""), *_key_variants(stack.operator_key)]:
        target = _with_query(path, query)
        status, body = _raw(stack.proxy_url, method, target, headers, BODIES.get(template, b"{}"))
        assert status == 404, (target, headers, status, body[:200])
        error = json.loads(body)["error"]  # the OpenAI error shape the proxy gives every unknown route
        assert error["type"] == "not_found_error" and "admin listener" in error["message"]
        assert stack.operator_key.encode() not in body


@pytest.mark.parametrize("template", SPELLINGS)
def test_no_spelling_of_an_admin_path_reaches_it_on_the_main_port(
    stack: StackInfo, rollout: dict[str, Any], template: str
) -> None:
    path = _path(template, rollout)
    for method in ("GET", "POST"):
        status, body = _raw(stack.proxy_url, method, path, {"Authorization": f"Bearer {stack.operator_key}"})
        assert status in (404, 405), (method, path, status, body[:200])  # no such route here, never 200 or 401
        assert b'"id":"run-' not in body and b"rollwire traces" not in body and b"# HELP" not in body


@pytest.mark.parametrize(("method", "template"), ADMIN_PATHS)
def test_the_admin_port_answers_with_the_key_and_refuses_without(
    stack: StackInfo, rollout: dict[str, Any], method: str, template: str
) -> None:
    path = _path(template, rollout)
    if template == "/metrics":  # a Prometheus scrape: no key, the port alone keeps rollouts out
        status, body = _raw(stack.admin_url, method, path, {})
        assert status == 200 and b"rollwire_proxy_http_requests_total" in body
        return
    body = BODIES.get(template, b"{}")
    wrong = [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {rollout['token']}"},
             {"Cookie": "rollwire_operator=wrong"}]  # fmt: skip
    for headers in wrong:
        status, answer = _raw(stack.admin_url, method, path, headers, body)
        assert status == 401, (path, headers, status, answer[:200])
    # the admin API takes the key in a header; the viewer also as its cookie, and its page as the login query
    accepted = _key_variants(stack.operator_key)[: 4 if template == "/ui/" else 3 if template.startswith("/ui/") else 2]
    for i, (headers, query) in enumerate(accepted):
        status, answer = _raw(stack.admin_url, method, _with_query(path, query), headers, body)
        expected = {303} if query else {200, 201}  # logged in: the cookie is set, the key leaves the address
        if i and method == "POST":
            expected.add(409)  # let in again, but the first call already moved the rollout on
        assert status in expected, (path, headers, query, status, answer[:300])


def test_no_child_holds_a_secret_on_its_command_line(stack: StackInfo) -> None:
    """The operator key, the env servers' secret and the store URL go through environments, and each part's
    environment holds only the secrets it uses."""
    secrets = {"operator key": stack.operator_key, "env secret": ENV_SECRET, "store URL": stack.db_url}
    assert stack.pids and set(stack.pids) == {"env", "gateway", "proxy"}  # an upstream: no engine part
    for part, pid in stack.pids.items():
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"rollwire.app.cli" in argv, argv  # it is the part, not some other process with its pid
        for name, secret in secrets.items():
            assert not any(secret.encode() in arg for arg in argv), f"{part}'s command line holds the {name}"
        assert not any(arg.startswith(b"--operator-key") for arg in argv), argv
        environ = dict(
            entry.split(b"=", 1) for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in entry
        )
        held = {name for name, secret in secrets.items() if secret.encode() in environ.values()}
        wanted = {"proxy": {"operator key", "store URL"}, "gateway": {"env secret", "store URL"}, "env": {"env secret"}}
        assert held == wanted[part], (part, held)
