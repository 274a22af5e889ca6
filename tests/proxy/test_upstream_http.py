"""The proxy's upstream HTTP client against raw loopback servers: kept-alive connections are reused, one the
server dropped is retried on a fresh one, chunked bodies split anywhere still give whole lines, a body that
arrives while its reader is busy is read without another wait, a reader waiting for a body of known size is woken
once, and a silent upstream times out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from rollwire.proxy.upstream_http import Pool, Timeouts, _Connection, _take_chunks

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0)
    return await reader.readexactly(length)


async def _serve(handler: Handler, test: Callable[[Pool], Awaitable[None]], read_timeout: float = 5.0) -> list[int]:
    """Run ``test`` against a server on a free port; returns how many connections the server accepted."""
    accepted: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Pool(f"http://127.0.0.1:{port}", Timeouts(connect=5.0, read=read_timeout))
    try:
        await test(pool)
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()
    return accepted


def _answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


def test_keep_alive_reuse_and_a_dropped_connection_is_retried() -> None:
    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not reader.at_eof():
            try:
                body = await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            writer.write(_answer(b"echo:" + body))
            await writer.drain()

    async def three(pool: Pool) -> None:
        for i in range(3):
            response = await pool.request("POST", "/x", b"%d" % i)
            assert (response.status_code, await response.read()) == (200, b"echo:%d" % i)

    assert len(asyncio.run(_serve(keep_alive, three))) == 1  # one connection for all three

    closed = asyncio.Event()

    async def one_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await _read_request(reader)
        writer.write(_answer(b"echo:" + body))  # no "connection: close": the client keeps it, then it dies
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        closed.set()

    async def twice(pool: Pool) -> None:
        for i in range(2):
            response = await pool.request("POST", "/x", b"%d" % i)
            assert await response.read() == b"echo:%d" % i
            await closed.wait()  # the server has closed the kept-alive connection

    assert len(asyncio.run(_serve(one_then_close, twice))) == 2


def test_chunked_lines_split_across_chunks() -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n")
        for piece in (b"data: one\n", b"\ndata: t", b"w", b"o\n\nda", b"ta: [DONE]\n\n"):  # "two" in three pieces
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(0.01)  # the server's pace: each piece leaves as a chunk of its own
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client closes

    async def lines(pool: Pool) -> None:
        response = await pool.request("POST", "/x", b"{}")
        got = [line async for line in response.iter_lines()]
        response.close()
        assert [line for line in got if line] == [b"data: one", b"data: two", b"data: [DONE]"]

    asyncio.run(_serve(chunked, lines))


def test_a_silent_upstream_times_out() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await asyncio.sleep(2)  # a server that never answers (the client's 0.2 s timeout is what is tested)

    async def wait(pool: Pool) -> None:
        with pytest.raises(TimeoutError):
            await pool.request("POST", "/x", b"{}")

    asyncio.run(_serve(silent, wait, read_timeout=0.2))


def test_a_chunked_body_split_at_any_byte_gives_the_same_chunks() -> None:
    """However the packets cut the chunk framing (size line, data, CRLF, last chunk, trailer), the chunks taken
    from the buffer are the whole ones, in order, and the body's end is seen exactly once."""
    pieces = [b"data: one\n\n", b"data: two\n", b"\n", b"x" * 300]
    body = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\ntrailer: x\r\n\r\n"
    for cut in range(len(body) + 1):
        conn = _Connection()
        taken: list[bytes] = []
        ends = 0
        for packet in (body[:cut], body[cut:]):
            conn.data_received(packet)
            parts, last, _ = _take_chunks(conn)
            taken += parts
            ends += last
        assert (taken, ends, bytes(conn.buffer)) == (pieces, 1, b""), cut


async def _until_buffered(response: object, ended: bool) -> None:
    """Until the connection has bytes the reader has not taken, and has ended where ``ended`` (the loop's own
    turns, no timer)."""
    conn = response._conn  # type: ignore[attr-defined]
    for _ in range(100_000):
        if conn.buffer and (conn.ended or not ended):
            return
        await asyncio.sleep(0)
    raise AssertionError("the rest of the body never arrived")


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_a_body_that_arrives_while_its_reader_is_busy_is_read_without_waiting_for_more(framing: str) -> None:
    """The upstream sends the rest of its answer, end included, while the reader handles the first part: nothing
    more will come, so a reader that waited for more bytes before taking those would wait out its timeout."""
    rest_sent = asyncio.Event()
    first_read = asyncio.Event()

    async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        if framing == "chunked":
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nfirst")
        await writer.drain()
        await first_read.wait()
        writer.write(b"4\r\nrest\r\n0\r\n\r\n" if framing == "chunked" else b"rest")
        await writer.drain()
        if framing == "close":
            writer.close()
        rest_sent.set()
        await reader.read()

    async def read(pool: Pool) -> None:
        response = await pool.request("POST", "/x", b"{}")
        got = []
        async for parts in response._parts():
            got += parts
            if len(got) == 1:
                first_read.set()
                await rest_sent.wait()
                await _until_buffered(response, ended=framing == "close")
        response.close()
        assert b"".join(got) == b"firstrest"

    asyncio.run(_serve(server, read, read_timeout=2.0))


def test_a_reader_waiting_for_a_body_of_known_size_is_woken_once_it_is_all_there() -> None:
    async def check() -> None:
        conn = _Connection()
        waiting = asyncio.ensure_future(conn.more(asyncio.get_running_loop().time() + 5.0, need=1000))
        await asyncio.sleep(0)
        for _ in range(9):
            conn.data_received(b"x" * 100)
            await asyncio.sleep(0)
            assert not waiting.done(), len(conn.buffer)
        conn.data_received(b"x" * 100)
        await waiting
        assert len(conn.buffer) == 1000
        conn.transport = None

    asyncio.run(check())
