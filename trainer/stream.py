"""Cursor-resumable consumer of the proxy's trajectory stream (NDJSON over long-polling HTTP).

``GET /admin/v1/trajectories/stream?run=RUN&after=CURSOR&wait=SECONDS`` (on the proxy's admin listener)
answers one ``Trajectory.to_dict()`` per line, ordered by cursor. The consumer asks again after the last
cursor it saw, so a restarted trainer that passes its checkpointed cursor misses nothing and
sees nothing twice. httpx errors become rollwire errors here, once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from rollwire.errors import InvalidRequest, NotFound, Unauthorized, UpstreamError, UpstreamTimeout
from rollwire.trajectory import Trajectory

logger = logging.getLogger(__name__)

STREAM_PATH = "/admin/v1/trajectories/stream"


@dataclass(frozen=True, slots=True)
class StreamConfig:
    admin_url: str
    """The proxy's admin listener (``StackInfo.admin_url``; the port rollouts call has no stream)."""
    operator_key: str
    run: str
    wait_s: float = 20.0
    """Long-poll: how long the proxy may hold a request open before answering with no lines."""
    retries: int = 5
    """Consecutive connection failures tolerated (with back-off) before giving up."""


def _raise_for_status(response: httpx.Response, run: str) -> None:
    if response.status_code == 401 or response.status_code == 403:
        raise Unauthorized("the proxy rejected the operator key for the trajectory stream")
    if response.status_code == 404:
        raise NotFound(f"the proxy knows no run {run!r} (or this is not its admin listener)")
    if response.status_code == 400:
        response.read()
        raise InvalidRequest(f"the proxy refused the stream request: {response.text[:200]}")
    if response.status_code >= 400:
        raise UpstreamError(f"trajectory stream answered HTTP {response.status_code}")


class TrajectoryStream:
    """Yields trajectories after a cursor, forever (or until one long-poll comes back empty, if asked)."""

    def __init__(self, config: StreamConfig, client: httpx.Client | None = None) -> None:
        self.config = config
        self.cursor = 0
        timeout = httpx.Timeout(connect=10.0, read=config.wait_s + 30.0, write=10.0, pool=10.0)
        self._client = client or httpx.Client(timeout=timeout)
        self._owns_client = client is None

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def _poll(self, after: int) -> Iterator[Trajectory]:
        params: dict[str, str | int | float] = {"run": self.config.run, "after": after, "wait": self.config.wait_s}
        headers = {"Authorization": f"Bearer {self.config.operator_key}", "Accept": "application/x-ndjson"}
        url = self.config.admin_url.rstrip("/") + STREAM_PATH
        with self._client.stream("GET", url, params=params, headers=headers) as response:
            _raise_for_status(response, self.config.run)
            for number, line in enumerate(response.iter_lines(), start=1):
                if not line.strip():
                    continue
                try:
                    yield Trajectory.from_dict(json.loads(line))
                except (ValueError, KeyError, TypeError) as exc:
                    raise UpstreamError(f"trajectory stream line {number} is not a trajectory: {exc}") from exc

    def poll(self) -> list[Trajectory]:
        """One long-poll after the current cursor; advances the cursor past what it returns."""
        failures = 0
        while True:
            try:
                out = []
                for trajectory in self._poll(self.cursor):
                    if trajectory.cursor <= self.cursor:  # a replayed line: never hand it out twice
                        continue
                    self.cursor = trajectory.cursor
                    out.append(trajectory)
                return out
            except httpx.TimeoutException as exc:
                failures += 1
                if failures > self.config.retries:
                    raise UpstreamTimeout(f"trajectory stream timed out {failures} times") from exc
            except httpx.TransportError as exc:
                failures += 1
                if failures > self.config.retries:
                    where = self.config.admin_url
                    raise UpstreamError(f"cannot reach the proxy's admin listener at {where}: {exc}") from exc
            logger.warning("trajectory stream failed (attempt %d), retrying", failures)
            time.sleep(min(0.5 * 2 ** (failures - 1), 10.0))

    def __iter__(self) -> Iterator[Trajectory]:
        while True:
            yield from self.poll()


__all__ = ["STREAM_PATH", "StreamConfig", "TrajectoryStream"]
