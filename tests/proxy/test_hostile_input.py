"""Must-show 8: hostile request bodies get a 400 in the dialect's own error shape and store nothing, the
keep-alive connection they came on stays usable (also after a 500 from a bug), and a non-streaming client
that hangs up stops its generation, which is recorded as partial."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from sqlmodel import Session, select
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rollwire.app.serving import ServerThread
from rollwire.proxy.edge import ErrorEdge
from rollwire.request_body import read_json_sent
from rollwire.store import ModelCall, decode_ids, open_engine
from tests.polling import wait_until
from tests.proxy.conftest import Proxy
from tests.proxy.upstream_shim import UpstreamShim, shimmed_engine

DIALECTS = {
    "chat": ("/chat/completions", lambda m, text: {"model": m, "messages": [{"role": "user", "content": text}]}),
    "responses": ("/responses", lambda m, text: {"model": m, "input": text, "max_output_tokens": 2}),
    "messages": (
        "/messages",
        lambda m, text: {"model": m, "messages": [{"role": "user", "content": text}], "max_tokens": 2},
    ),
}


def _hostile(body: dict[str, Any]) -> dict[str, bytes]:
    """Bodies no strict JSON reader accepts as text, each built around one good body."""
    good = json.dumps(body)
    head = good[:-1]
    return {
        "lone surrogate": good.replace('"hi"', '"a \\ud800 b"').encode(),
        "deep nesting": (head + ', "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}").encode(),
        "nesting past the limit": (head + ', "metadata": ' + "[" * 200 + "]" * 200 + "}").encode(),
        "NaN": (head + ', "temperature": NaN}').encode(),
        "stream as a string": (head + ', "stream": "yes"}').encode(),
        "stream as a number": (head + ', "stream": 1}').encode(),
    }


def _check_shape(dialect: str, body: dict[str, Any]) -> str:
    """The error's message, after checking the body is the dialect's error shape."""
    if dialect == "messages":
        assert body["type"] == "error" and isinstance(body["error"]["type"], str), body
        return str(body["error"]["message"])
    assert isinstance(body["error"]["type"], str) and "param" in body["error"], body
    return str(body["error"]["message"])


def _calls(store_url: str) -> list[ModelCall]:
    with Session(open_engine(store_url)) as session:
        return list(session.exec(select(ModelCall)).all())


def _post(conn: http.client.HTTPConnection, path: str, body: bytes) -> tuple[int, dict[str, Any], bool]:
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, json.loads(response.read()), response.will_close


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_hostile_bodies_are_400s_in_the_dialect_shape_on_a_connection_that_stays_open(
    proxy: Proxy, served_model: str, dialect: str
) -> None:
    route, build = DIALECTS[dialect]
    rollout = proxy.new_rollout()
    url = urlsplit(rollout["base_url"])
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.connect()
    first = conn.sock
    for name, body in _hostile(build(served_model, "hi")).items():
        status, answer, closing = _post(conn, url.path + route, body)
        assert status == 400, (name, answer)
        message = _check_shape(dialect, answer)
        assert any(w in message for w in ("JSON", "nested", "surrogate", "stream")), (name, message)
        assert not closing and conn.sock is first, f"{name}: the server closed the connection"
    good = {**build(served_model, "hi"), "max_tokens": 2} if dialect == "chat" else build(served_model, "hi")
    status, answer, _ = _post(conn, url.path + route, json.dumps(good).encode())
    assert status == 200 and conn.sock is first, answer
    conn.close()
    assert len(_calls(proxy.store_url)) == 1  # only the good request was recorded


@pytest.fixture()
def buggy_app() -> Iterator[str]:
    """Routes that fail as a bug would, behind the proxy's ErrorEdge."""

    async def broken(request: Request) -> Response:
        raise RuntimeError("a bug")

    async def fine(request: Request) -> Response:
        return JSONResponse({"ok": True})

    routes = [Route(p, broken, methods=["POST"]) for p in ("/v1/messages", "/v1/chat/completions")]
    app = Starlette(routes=[*routes, Route("/ok", fine)], middleware=[Middleware(ErrorEdge)])
    with ServerThread(app) as server:
        yield server.url


def test_a_bug_is_a_500_in_the_dialect_shape_and_the_connection_stays_usable(buggy_app: str) -> None:
    url = urlsplit(buggy_app)
    assert url.hostname is not None
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.connect()
    first = conn.sock
    for path, dialect in (("/v1/messages", "messages"), ("/v1/chat/completions", "chat")):
        status, body, closing = _post(conn, path, b"{}")
        assert status == 500 and _check_shape(dialect, body) == "internal error: RuntimeError"
        assert not closing
    conn.request("GET", "/ok")
    assert conn.getresponse().read() == b'{"ok":true}' and conn.sock is first


def test_a_client_that_leaves_mid_body_is_noted_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    """The client closes its connection with its body half sent: nobody is left to answer and nothing was asked
    of the model, so the edge notes it rather than logging an unhandled error with its traceback."""
    done = threading.Event()

    async def read(request: Request) -> Response:
        try:
            await read_json_sent(request, 1 << 20)
        finally:
            done.set()
        return JSONResponse({})

    app = Starlette(routes=[Route("/v1/chat/completions", read, methods=["POST"])], middleware=[Middleware(ErrorEdge)])
    with caplog.at_level(logging.INFO, logger="rollwire.proxy.edge"), ServerThread(app) as server:
        url = urlsplit(server.url)
        with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
            head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
            sock.sendall(head + b'{"model": "m", "messa')
        assert done.wait(30), "the route never read the body"
    # the server has stopped: its handling of that request is over
    edge = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "rollwire.proxy.edge"]
    assert edge == [("INFO", "client left before its request was read (/v1/chat/completions)")]


@pytest.fixture()
def shimmed(tiny_model_dir: Path, tmp_path: Path) -> Iterator[tuple[str, UpstreamShim]]:
    with shimmed_engine(tiny_model_dir, tmp_path / "engine") as found:
        yield found


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_a_non_streaming_client_that_hangs_up_stops_its_generation(
    start_proxy: Callable[..., Proxy], shimmed: tuple[str, UpstreamShim], served_model: str, dialect: str
) -> None:
    upstream, shim = shimmed
    proxy = start_proxy(upstream)
    route, build = DIALECTS[dialect]
    body = build(served_model, "Write a very long story.")
    body["max_output_tokens" if dialect == "responses" else "max_tokens"] = 4000
    body["temperature"] = 1.0
    url = urlsplit(proxy.new_rollout()["base_url"])
    data = json.dumps(body).encode()
    head = f"POST {url.path}{route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    with socket.create_connection((url.hostname, url.port), timeout=60) as sock:
        sock.sendall(f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data)
        assert shim.streaming.wait(60), "the engine never started"
    row = wait_until(lambda: next(iter(_calls(proxy.store_url)), None), "the call's row (recorded after the hang-up)",
                     timeout_s=60)
    assert row is not None  # (wait_until returned it once it was there)
    assert row.status == "partial" and row.finish_reason == "abort", (row.status, row.error)
    assert "client left" in (row.error or "")
    assert 0 < len(decode_ids(row.completion_ids)) < 4000


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        ("/admin/v1/runs", {"config": [1, 2]}, "config"),
        ("/admin/v1/runs", {"name": ["x"]}, "name"),
        ("/admin/v1/runs/{run}/rollouts", {"sample_index_start": "a"}, "sample_index_start"),
        ("/admin/v1/runs/{run}/rollouts", {"task_id": {"a": 1}}, "task_id"),
        ("/admin/v1/runs/{run}/rollouts", {"meta": "x"}, "meta"),
        ("/admin/v1/rollouts/{rollout}/finish", {"reward_breakdown": [1]}, "reward_breakdown"),
        ("/admin/v1/rollouts/{rollout}/finish", {"exit_code": "1"}, "exit_code"),
        ("/admin/v1/rollouts/{rollout}/finish", {"reward": True}, "reward"),
    ],
)
def test_admin_bodies_of_the_wrong_type_are_400s(proxy: Proxy, route: str, body: dict[str, Any], param: str) -> None:
    rollout = proxy.new_rollout()
    answer = proxy.admin.post(route.format(run=rollout["run"], rollout=rollout["id"]), json=body)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text
