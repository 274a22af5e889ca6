"""The bench's stub upstream: a bare asyncio HTTP/1.1 server (no framework), so it costs far less per call than
the proxy in front of it and the rows measure the proxy, not the stub.

    python bench/proxy_stub.py PORT IDS [PACE_MS] [MAX_MODEL_LEN]

Answers every call with the same tool call: on /v1/completions as the token ``IDS`` (comma-separated, the tiny
model's tokens for a hermes tool call) with logprobs, on /v1/chat/completions (LiteLLM's way in) as a chat
message; both streamed one token per chunk when the request says ``"stream": true``. A completion that asks for
``return_token_ids`` gets the prompt's ids back as vLLM sends them (on the first chunk, or on the choice), so a
proxy that reads them pays for that here too.

By default the whole answer goes out at once, in one write. With ``PACE_MS`` the stub samples the way an
engine does: one token every ``PACE_MS`` milliseconds. A streamed answer then goes out as it is sampled, one
HTTP chunk per token (vLLM's server sends chunked event streams), so each token reaches the proxy on its own;
an answer that is not streamed goes out whole once its last token is sampled. Like vLLM since mid-2026 it
takes a per-request ``stream_interval`` (and lists it in ``/openapi.json``): the first token's event goes out
at once, then one event for that many tokens (their ids and logprobs together), paced or not.
``/v1/models`` reports a context of ``MAX_MODEL_LEN`` tokens (default 32768): the proxy fits output caps to it and
refuses a prompt that fills it, so a bench of longer conversations names a longer one.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys

import event_loop

ARGUMENTS = '{"command": "ls"}'


def _response(body: bytes, content_type: bytes = b"application/json") -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: " + content_type + b"\r\ncontent-length: %d\r\n\r\n" % len(body)
    return head + body


def _events(events: list[dict]) -> list[bytes]:
    return [f"data: {json.dumps(e, separators=(',', ':'))}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]


def _sse(events: list[bytes]) -> bytes:
    """An event stream's events as one response (a whole answer in one write)."""
    return _response(b"".join(events), b"text/event-stream")


STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _split(text: bytes, placeholder: bytes) -> tuple[bytes, bytes]:
    """``text`` around ``placeholder``'s value: what comes before the value, and after it."""
    at = text.index(placeholder) + len(placeholder) - 1
    return text[:at], text[at + 1 :]


def _chunked(event: bytes) -> bytes:
    return b"%x\r\n" % len(event) + event + b"\r\n"


OPENAPI = _response(b'{"components":{"schemas":{"CompletionRequest":{"properties":{"stream_interval":{}}}}}}')
_INTERVAL = re.compile(rb'"stream_interval":\s*(\d+)')
ECHO = b'"prompt_token_ids":0'
"""Where an answer's prompt echo goes (``Stub.echoing`` puts the request's ids there)."""


class Stub:
    def __init__(self, ids: list[int], pace_s: float = 0.0, max_model_len: int = 32768) -> None:
        self.ids = ids
        self.pace_s = pace_s
        lp = {"token_logprobs": [-0.5] * len(ids), "tokens": None, "top_logprobs": None}
        choice = {"index": 0, "text": "", "finish_reason": "stop", "token_ids": ids, "logprobs": lp}
        self.completion = _response(json.dumps({"id": "c", "object": "text_completion", "choices": [choice]}).encode())
        self.completion_events = _events(self._pieces(1))
        self.completion_stream = _sse(self.completion_events)
        whole = {"id": "c", "object": "text_completion", "choices": [{**choice, "prompt_token_ids": 0}]}
        self.echo_whole = _split(json.dumps(whole, separators=(",", ":")).encode(), ECHO)
        self._echo_events: dict[int, tuple[tuple[bytes, bytes], list[bytes], list[int]]] = {}
        card = {"id": "stub", "object": "model", "max_model_len": max_model_len}
        self.models = _response(json.dumps({"object": "list", "data": [card]}).encode())
        self.calls = 0

    def echoing(self, body: bytes, stream: bool, interval: int) -> tuple[bytes, list[bytes] | None, list[int]]:
        """The completion with the prompt's ids echoed as vLLM does: (the whole answer, its events or None, the
        tokens in each event). The ids' JSON text is copied from the request as it stands, so the echo costs the
        stub no parse."""
        at = body.index(b"[", body.index(b'"prompt":'))
        prompt = body[at : body.index(b"]", at) + 1]
        if not stream:
            head, tail = self.echo_whole
            return _response(head + prompt + tail), None, []
        (head, tail), later, tokens = self.echo_events(interval)
        events = [head + prompt + tail, *later]
        return _sse(events), events, tokens

    def _pieces(self, interval: int) -> list[dict]:
        """The answer's stream events as vLLM sends them for a ``stream_interval``: the first token alone, then
        ``interval`` tokens an event (their ids and logprobs together), the finish reason on the last."""
        ids = self.ids
        groups = [ids[:1], *(ids[at : at + interval] for at in range(1, len(ids), interval))]
        pieces = []
        for n, group in enumerate(groups):
            last = n == len(groups) - 1
            c = {"index": 0, "text": "", "token_ids": group, "finish_reason": "stop" if last else None}
            c["logprobs"] = {"token_logprobs": [-0.5] * len(group), "tokens": None, "top_logprobs": None}
            pieces.append({"id": "c", "object": "text_completion", "choices": [c]})
        return pieces

    def echo_events(self, interval: int) -> tuple[tuple[bytes, bytes], list[bytes], list[int]]:
        """For ``interval`` (made once each): the first event around its prompt echo, the events after it
        (``[DONE]`` last), and the tokens in each event."""
        if interval not in self._echo_events:
            first, *later = self._pieces(interval)
            tokens = [len(p["choices"][0]["token_ids"]) for p in (first, *later)] + [0]
            first = {**first, "choices": [{**first["choices"][0], "prompt_token_ids": 0}]}
            self._echo_events[interval] = (_split(_events([first])[0], ECHO), _events(later), tokens)
        return self._echo_events[interval]

    def chat(self, stream: bool) -> list[dict]:
        """The chat answer: one body (not streamed) or its stream's events."""
        self.calls += 1
        call = {
            "id": f"call_{self.calls}",
            "type": "function",
            "function": {"name": "run_shell", "arguments": ARGUMENTS},
        }
        usage = {"prompt_tokens": 100, "completion_tokens": len(self.ids), "total_tokens": 100 + len(self.ids)}
        head = {"id": "c", "created": 0, "model": "stub"}
        if not stream:
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
            return [{**head, "object": "chat.completion", "choices": [choice], "usage": usage}]
        n = len(self.ids) - 1
        step = max(1, len(ARGUMENTS) // max(1, n - 1))
        first = {"index": 0, "id": call["id"], "type": "function", "function": {"name": "run_shell", "arguments": ""}}
        deltas = [{"role": "assistant", "tool_calls": [first]}]
        deltas += [
            {"tool_calls": [{"index": 0, "function": {"arguments": ARGUMENTS[i : i + step]}}]}
            for i in range(0, len(ARGUMENTS), step)
        ]
        chunks = [{**head, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d}]} for d in deltas]
        end = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
        chunks.append({**head, "object": "chat.completion.chunk", "choices": [end], "usage": usage})
        return chunks

    async def answer(
        self, writer: asyncio.StreamWriter, whole: bytes, events: list[bytes] | None, tokens: list[int] | None = None
    ) -> None:
        """``whole`` at once; paced: ``events`` (a stream) each as its ``tokens`` are sampled (one an event unless
        told), else ``whole`` after the last token."""
        if not self.pace_s:
            writer.write(whole)
            return
        if events is None:
            await asyncio.sleep(self.pace_s * len(self.ids))
            writer.write(whole)
            return
        writer.write(STREAM_HEAD)
        for event, count in zip(events, tokens or [1] * len(events)):
            await asyncio.sleep(self.pace_s * count)
            writer.write(_chunked(event))
        writer.write(b"0\r\n\r\n")

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, _, rest = head.partition(b"\r\n")
                length = 0
                for header in rest.lower().split(b"\r\n"):
                    if header.startswith(b"content-length:"):
                        length = int(header[15:])
                body = await reader.readexactly(length) if length else b""
                stream = b'"stream":true' in body or b'"stream": true' in body
                path = line.split(b" ")[1]
                if path.endswith(b"/completions") and b"/chat/" not in path:
                    if b'"return_token_ids"' in body:
                        asked = _INTERVAL.search(body)
                        interval = max(1, int(asked[1])) if asked else 1
                        await self.answer(writer, *self.echoing(body, stream, interval))
                    elif stream:
                        await self.answer(writer, self.completion_stream, self.completion_events)
                    else:
                        await self.answer(writer, self.completion, None)
                elif path.endswith(b"/chat/completions"):
                    chat = self.chat(stream)
                    if stream:
                        events = _events(chat)
                        await self.answer(writer, _sse(events), events)
                    else:
                        await self.answer(writer, _response(json.dumps(chat[0]).encode()), None)
                elif path == b"/openapi.json":
                    writer.write(OPENAPI)
                else:
                    writer.write(self.models)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def main(port: int, ids: list[int], pace_s: float, max_model_len: int = 32768) -> None:
    stub = Stub(ids, pace_s, max_model_len)
    server = await asyncio.start_server(stub.serve, "127.0.0.1", port, backlog=4096)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    pace_ms = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    context = int(sys.argv[4]) if len(sys.argv) > 4 else 32768
    event_loop.run(main(int(sys.argv[1]), [int(t) for t in sys.argv[2].split(",")], pace_ms / 1000, context))
