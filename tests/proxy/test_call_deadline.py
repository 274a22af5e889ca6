"""The upstream client's deadline is for the whole exchange: an upstream that sends one byte at a time, each well
within the per-read timeout, is cut off at the total (or a caller's tighter ``DEADLINE``) instead of holding the
call for as long as it keeps trickling."""

from __future__ import annotations

import asyncio

import pytest

from rollwire.proxy.upstream_http import DEADLINE, Pool, Timeouts


async def _trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stop: asyncio.Event) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    while not stop.is_set():  # a chunk of one byte every 50 ms, forever
        writer.write(b"1\r\nx\r\n")
        await writer.drain()
        try:
            await asyncio.wait_for(stop.wait(), 0.05)
        except TimeoutError:
            pass


async def _read_all(timeouts: Timeouts, own: float | None) -> None:
    stop = asyncio.Event()
    server = await asyncio.start_server(lambda r, w: _trickle(r, w, stop), "127.0.0.1", 0)
    pool = Pool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", timeouts)
    token = DEADLINE.set(None if own is None else asyncio.get_running_loop().time() + own)
    try:
        response = await pool.request("GET", "/")
        with pytest.raises(TimeoutError):
            await response.read()
    finally:
        DEADLINE.reset(token)
        stop.set()
        await pool.close()
        server.close()


@pytest.mark.parametrize(("timeouts", "own"), [(Timeouts(5.0, 5.0, total=1.0), None), (Timeouts(5.0, 5.0), 1.0)])
def test_a_trickling_upstream_hits_the_total_deadline(timeouts: Timeouts, own: float | None) -> None:
    asyncio.run(asyncio.wait_for(_read_all(timeouts, own), 30))  # per-read only, this would never end
