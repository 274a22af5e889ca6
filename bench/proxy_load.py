"""The bench's load generator: a bare asyncio HTTP/1.1 client (keep-alive, one connection per concurrent
worker) in its own process, so it is not what limits the rows.

    python bench/proxy_load.py SPEC   (a JSON object; prints {"latencies_ms": [...], "wall_s": ...})

``kind`` "chat": each worker runs multi-turn tool conversations (``turns`` calls each, one rollout path per
conversation): it sends the history, reads the assistant's tool call back (from JSON or from the stream's
deltas) and appends it with a tool result, so every later call extends the one before. ``kind`` "direct":
the completions the proxy would send its upstream, prompts as long as the turn's, straight to the stub.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import event_loop

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a shell command in the task's workspace and return its output.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
SYSTEM = "You are a careful software engineer. Use the tools."
GUIDANCE = (
    "\nRead the relevant files before you change them. Run the tests after every change and read their output. "
    "Keep changes small and explain each one. Never delete files you did not create. "
)
"""Filler for ``system_chars``: a harness's system prompt is mostly guidance like this (Claude Code's and Codex's
run to 10-20k characters)."""


def harness_tools(extra: int) -> list[dict[str, Any]]:
    """``TOOLS`` and ``extra`` more, each shaped like a harness's (a paragraph of description, a few described
    parameters: ~1.5k characters of JSON; Claude Code and Codex send 10-20 tools)."""
    described = "A parameter the tool reads; see the tool's description for how it is used and what it may hold. "
    more = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": "Works on the task's files and returns what it found. " * 12,
                "parameters": {
                    "type": "object",
                    "properties": {f"arg_{j}": {"type": "string", "description": described} for j in range(6)},
                    "required": ["arg_0"],
                },
            },
        }
        for i in range(extra)
    ]
    return TOOLS + more


RESULT = "total 12\ndrwxr-xr-x 2 user user 4096 src\n-rw-r--r-- 1 user user  220 README.md\n"


class Conn:
    def __init__(self, host: str, port: int, headers: str) -> None:
        self.host, self.port = host, port
        self.extra = headers
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> bytes:
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{self.extra}\r\n"
        ).encode()
        reused = self.writer is not None
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(head + body)
        try:
            raw = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not reused or exc.partial:
                raise
            # the server closed a kept-alive connection before reading this request (as HTTP clients do: resend
            # once on a new connection); seen with LiteLLM at concurrency 16
            self.writer.close()
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.writer.write(head + body)
            raw = await self.reader.readuntil(b"\r\n\r\n")
        status = raw[9:12]
        lower = raw.lower()
        if b"transfer-encoding: chunked" in lower:
            parts = []
            while True:
                size = int((await self.reader.readline()).strip(), 16)
                data = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(data[:-2])
            data = b"".join(parts)
        else:
            at = lower.index(b"content-length:") + 15
            data = await self.reader.readexactly(int(lower[at : lower.index(b"\r\n", at)]))
        if status != b"200":
            raise SystemExit(f"{path} answered {status.decode()}: {data[:300].decode(errors='replace')}")
        return data


def _streamed_message(data: bytes) -> dict[str, Any]:
    """The assistant message a stream of chat chunks adds up to (content and tool calls)."""
    content = ""
    calls: dict[int, dict[str, Any]] = {}
    for line in data.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        for choice in json.loads(line[6:]).get("choices", ()):
            delta = choice.get("delta") or {}
            content += delta.get("content") or ""
            for call in delta.get("tool_calls") or ():
                got = calls.setdefault(
                    call["index"], {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                got["id"] = call.get("id") or got["id"]
                fn = call.get("function") or {}
                got["function"]["name"] += fn.get("name") or ""
                got["function"]["arguments"] += fn.get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


class Conversation:
    """One rollout's multi-turn tool conversation: each call sends the history so far, and each answer's tool call
    comes back into it with a tool result, so every call extends the one before."""

    def __init__(self, path: str, system: str, tools: list[dict[str, Any]], stream: bool) -> None:
        self.path, self.tools, self.stream = path, tools, stream
        self.messages: list[Any] = [
            {"role": "system", "content": system},
            {"role": "user", "content": "List the files, then fix the failing test."},
        ]
        self.turn = 0

    def body(self) -> bytes:
        body = {"model": "stub", "messages": self.messages, "tools": self.tools, "max_tokens": 64}
        return json.dumps({**body, "stream": self.stream}).encode()

    def answered(self, data: bytes) -> None:
        """Take the answer to ``body()`` (JSON, or the stream's events) into the history."""
        message = _streamed_message(data) if self.stream else json.loads(data)["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        if not calls:
            raise SystemExit(f"no tool call in the answer: {message}")
        self.messages = self.messages + [
            {k: v for k, v in message.items() if v is not None and k in ("role", "content", "tool_calls")},
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": f"{RESULT}step {self.turn}\n"},
        ]
        self.turn += 1


def system_prompt(extra: int) -> str:
    """``SYSTEM`` and ``extra`` characters of guidance."""
    return SYSTEM + (GUIDANCE * (extra // len(GUIDANCE) + 1))[:extra] if extra else SYSTEM


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    latencies: list[float] = []
    issued = 0
    paths = list(reversed(spec["paths"]))
    stream, turns = spec["stream"], spec["turns"]
    extra = spec.get("system_chars", 0)
    system = system_prompt(extra)
    tools = harness_tools(spec.get("tools", 1) - 1)

    async def chat(conn: Conn) -> None:
        nonlocal issued
        while issued < spec["requests"] and paths:
            conversation = Conversation(paths.pop(), system, tools, stream)
            for _ in range(turns):
                if issued >= spec["requests"]:
                    return
                issued += 1
                start = time.perf_counter()
                data = await conn.post(conversation.path, conversation.body())
                latencies.append(time.perf_counter() - start)
                conversation.answered(data)

    bodies = [
        json.dumps(
            {
                "model": "stub",
                "prompt": [1000] * (extra // 4) + spec["prompt"] * (t + 1),  # ~4 characters a token
                "max_tokens": 64,
                "return_token_ids": True,
                "logprobs": 0,
                "stream": stream,
            }
        ).encode()
        for t in range(turns)
    ]

    async def direct(conn: Conn) -> None:
        nonlocal issued
        turn = 0
        while issued < spec["requests"]:
            issued += 1
            start = time.perf_counter()
            await conn.post(spec["paths"][0], bodies[turn % turns])
            latencies.append(time.perf_counter() - start)
            turn += 1

    work = chat if spec["kind"] == "chat" else direct
    conns = [Conn(spec["host"], spec["port"], spec.get("headers", "")) for _ in range(spec["concurrency"])]
    start = time.perf_counter()
    await asyncio.gather(*(work(c) for c in conns))
    wall = time.perf_counter() - start
    for c in conns:
        if c.writer is not None:
            c.writer.close()
    return {"latencies_ms": [x * 1e3 for x in latencies], "wall_s": wall}


if __name__ == "__main__":
    print(json.dumps(event_loop.run(run(json.loads(sys.argv[1])))))
