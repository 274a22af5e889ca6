"""A whole answer leaves in one write (head and body together); a head whose body comes later still leaves within
the loop's pass; nothing is reordered, lost or sent after an abort."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rollwire.app.http_writes import HeldHeadTransport
from rollwire.app.serving import ServerThread

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class Recording(asyncio.Transport):
    """A transport that keeps what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def write_eof(self) -> None:
        self.writes.append(b"<eof>")

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


def _held() -> tuple[HeldHeadTransport, Recording]:
    inner = Recording()
    return HeldHeadTransport(inner, asyncio.get_running_loop()), inner


def test_a_head_and_its_body_go_as_one_write() -> None:
    async def main() -> None:
        transport, inner = _held()
        transport.write(HEAD)
        assert inner.writes == [] and transport.get_write_buffer_size() == len(HEAD)
        transport.write(b"{}")
        assert inner.writes == [HEAD + b"{}"]
        transport.write(b"more")  # not a head: straight through
        assert inner.writes == [HEAD + b"{}", b"more"]
        await asyncio.sleep(0)  # the pass ends with nothing held: nothing more is sent
        assert inner.writes == [HEAD + b"{}", b"more"]

    asyncio.run(main())


def test_a_head_alone_leaves_at_the_end_of_the_pass() -> None:
    async def main() -> None:
        transport, inner = _held()
        transport.write(memoryview(HEAD))  # uvicorn may hand any bytes-like object
        assert inner.writes == []
        await asyncio.sleep(0)
        assert inner.writes == [HEAD]
        transport.write(b"{}")
        assert inner.writes == [HEAD, b"{}"]

    asyncio.run(main())


def test_close_sends_a_held_head_first_and_abort_drops_it() -> None:
    async def main() -> None:
        transport, inner = _held()
        transport.write(HEAD)
        transport.close()
        assert inner.writes == [HEAD] and inner.closed
        ended, eof = _held()
        ended.write(HEAD)
        ended.write_eof()
        assert eof.writes == [HEAD, b"<eof>"]
        aborted, dropped = _held()
        aborted.write(HEAD)
        aborted.abort()
        await asyncio.sleep(0)  # the pass ends: the dropped head is not sent after all
        assert dropped.writes == [] and dropped.aborted
        lines, joined = _held()
        lines.writelines([HEAD, b"{", b"}"])
        assert joined.writes == []  # one head: held as any other
        await asyncio.sleep(0)
        assert joined.writes == [HEAD + b"{}"]
        assert lines.get_extra_info("peername") == ("127.0.0.1", 1)  # the rest is the wrapped transport's

    asyncio.run(main())


def test_served_answers_whole_streamed_and_empty_arrive_intact() -> None:
    """Through uvicorn as every service serves: a whole answer, an empty one, a HEAD, and a stream whose head the
    client has before the first event exists (the event is made only once the client holds the head)."""
    head_seen = threading.Event()

    async def whole(_: Request) -> Response:
        return JSONResponse({"answer": "x" * 3000})

    async def empty(_: Request) -> Response:
        return Response(status_code=204)

    async def stream(_: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            if not await asyncio.to_thread(head_seen.wait, 10):  # the head left without a body, or never
                return
            yield b"data: one\n\n"
            yield b"data: two\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/whole", whole), Route("/empty", empty), Route("/stream", stream)])
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        for _ in range(3):  # keep-alive: each answer on the same connection, none mixed into the next
            assert client.get("/whole").json() == {"answer": "x" * 3000}
            assert client.get("/empty").status_code == 204
            head = client.head("/whole")
            assert head.status_code == 200 and head.content == b""
        with client.stream("GET", "/stream") as streamed:
            assert streamed.status_code == 200
            head_seen.set()
            assert b"".join(streamed.iter_bytes()) == b"data: one\n\ndata: two\n\n"
