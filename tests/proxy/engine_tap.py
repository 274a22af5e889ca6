"""EngineTap: an ASGI wrapper around the engine that keeps, independently of the proxy, each completion's
request and answer body, so tests can compare recorded trajectories with what the engine really saw and sampled.
A streamed answer is kept folded into the non-streamed body's shape (ids and logprobs concatenated per choice)."""

from __future__ import annotations

import json
from typing import Any


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
                    answer = fold_stream(response.decode()) if streamed else json.loads(response)
                    self.calls.append((body, answer))
                    recorded = True
            await send(message)

        await self.app(scope, tap_receive, tap_send)
