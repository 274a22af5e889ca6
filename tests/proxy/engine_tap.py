"""EngineTap: an ASGI wrapper around the engine that keeps, independently of the proxy, each completion's
request and answer body, so tests can compare recorded trajectories with what the engine really saw and sampled.
A streamed answer is kept folded into the non-streamed body's shape (ids and logprobs concatenated per choice).
A test can also hold each answer's end back (``hold_ends``) to see what reached its client before the engine finished,
without racing the engine."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

HOLD_LIMIT_S = 30.0
"""How long an end is held at most: a proxy that sent nothing before the end fails its test, it does not hang it."""


def fold_stream(sse: str) -> dict[str, Any]:
    """The server-sent chunks of one streamed completion as one completion body."""
    choices: dict[int, dict[str, Any]] = {}
    for line in sse.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for part in json.loads(line[6:]).get("choices", []):
            choice = choices.setdefault(
                part["index"],
                {"index": part["index"], "token_ids": [], "logprobs": {"token_logprobs": []}, "finish_reason": None},
            )
            choice["token_ids"] += part.get("token_ids") or []
            choice["logprobs"]["token_logprobs"] += (part.get("logprobs") or {}).get("token_logprobs") or []
            choice["finish_reason"] = part.get("finish_reason") or choice["finish_reason"]
            if part.get("prompt_token_ids") is not None:
                choice["prompt_token_ids"] = part["prompt_token_ids"]
    return {"choices": [choices[i] for i in sorted(choices)]}


class EngineTap:
    """Records (request JSON, response JSON) of every /v1/completions call; other routes pass through."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self._release: threading.Event | None = None

    @contextlib.contextmanager
    def holding_ends(self) -> Iterator[threading.Event]:
        """Inside, each completion's last message (a stream's ``[DONE]``) waits, unsent and unrecorded, until the
        yielded event is set (or ``HOLD_LIMIT_S`` passes); leaving lets every end through again."""
        release = threading.Event()
        self._release = release
        try:
            yield release
        finally:
            release.set()
            self._release = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/completions":
            await self.app(scope, receive, send)
            return
        request, response = bytearray(), bytearray()
        recorded = False

        async def tap_receive() -> Any:
            message = await receive()
            request.extend(message.get("body", b""))
            return message

        streamed = False

        async def tap_send(message: Any) -> None:
            nonlocal recorded, streamed
            if message["type"] == "http.response.start":  # an upstream may answer a stream request whole (JSON)
                streamed = dict(message.get("headers") or []).get(b"content-type", b"").startswith(b"text/event-stream")
            if message["type"] == "http.response.body" and not recorded:
                response.extend(message.get("body", b""))
                body = json.loads(request)
                # A stream is complete at its [DONE] line: record it before that line leaves, because the proxy
                # answers its client on [DONE] without waiting for the engine's closing empty message.
                done = b"data: [DONE]" in response if streamed else False
                if done or not message.get("more_body"):
                    if (release := self._release) is not None:
                        await asyncio.to_thread(release.wait, HOLD_LIMIT_S)
                    answer = fold_stream(response.decode()) if streamed else json.loads(response)
                    self.calls.append((body, answer))
                    recorded = True
            await send(message)

        await self.app(scope, tap_receive, tap_send)
