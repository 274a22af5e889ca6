"""Dialect-neutral request/response model: every dialect parses into these and renders from them.

Chat Completions, Responses and Anthropic Messages all reduce to a list of messages (with tool calls and
reasoning), a tool list, a tool choice and sampling parameters; the shared generation path only sees these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rollwire.compact_json import json_bytes, json_text
from rollwire.errors import RollwireError
from rollwire.text_memo import remember_short_texts


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """The arguments as the JSON text the model produced (or the harness sent back)."""

    def key(self) -> tuple[str, Any]:
        """Identity for history matching: name + parsed arguments (harnesses re-serialize JSON)."""
        return (self.name, _arguments_key(self.arguments))


REMEMBERED_ARGUMENTS_CHARS = 4096
"""Longest arguments text whose key is remembered (2,048 entries at most: ~8M characters in all)."""


@remember_short_texts(REMEMBERED_ARGUMENTS_CHARS, entries=2048)
def _arguments_key(arguments: str) -> str:
    """The arguments as canonical JSON text (keys sorted), or the text itself stripped when it is not JSON. Every
    call carries its rollout's history back, each earlier tool call with it: a key is worked out once."""
    try:
        return json_text(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments.strip()


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    _key: tuple[Any, ...] | None = field(default=None, init=False, repr=False, compare=False)

    def key(self) -> tuple[Any, ...]:
        """What must be unchanged for a message to count as carried back (reasoning is often dropped). Worked out
        once a message: a rollout's messages come back with every call, parsed once (``dialects.parsed``)."""
        if self._key is None:
            key = (
                self.role,
                self.content.strip(),
                tuple(c.key() for c in self.tool_calls),
                self.tool_call_id if self.role == "tool" else None,
            )
            object.__setattr__(self, "_key", key)
        return self._key  # type: ignore[return-value]

    def to_template(self) -> dict[str, Any]:
        """The message as Hugging Face chat templates expect it."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.reasoning:
            out["reasoning_content"] = self.reasoning
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _template_args(c)}}
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


def _template_args(call: ToolCall) -> Any:
    """Templates serialize dict arguments themselves (``tojson``); a non-JSON string is passed through."""
    try:
        return json.loads(call.arguments)
    except ValueError:
        return call.arguments


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """A required output format: vLLM's ``structured_outputs`` value (``{"json": schema}`` or
    ``{"json_object": true}``) and the request field that asked for it (named when it is refused)."""

    spec: dict[str, Any]
    param: str


@dataclass(frozen=True, slots=True)
class Sampling:
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    """Sample from the k likeliest tokens only (vLLM's ``top_k``; None: the engine's default, all)."""
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    top_logprobs: int | None = None
    """Top alternatives per token the client asked for (None: no logprobs in the response)."""
    structured: OutputFormat | None = None
    """A required output format, enforced by the upstream or refused (never silently dropped)."""


@dataclass(frozen=True, slots=True)
class Conversation:
    model: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    """Tool definitions in the OpenAI function shape ``{"type": "function", "function": {...}}``."""
    tool_choice: str = "auto"
    """auto, none, required, or the name of one tool that must be called."""
    sampling: Sampling = field(default_factory=Sampling)
    stream: bool = False
    include_usage: bool = False
    parallel_tool_calls: bool = True
    reasoning: bool | None = None
    """The template's reasoning switch (``enable_thinking``); None leaves the template's default."""

    def template_kwargs(self) -> dict[str, Any]:
        """Extra variables for the chat template (what vLLM's ``chat_template_kwargs`` carries)."""
        return {} if self.reasoning is None else {"enable_thinking": self.reasoning}

    known_tools_key: bytes | None = field(default=None, repr=False, compare=False)
    """``tools_key()``, where the dialect had it already (``dialects.parsed``: the same tools as a call before)."""
    _keys: tuple[tuple[Any, ...], ...] | None = field(default=None, init=False, repr=False, compare=False)

    def message_keys(self) -> tuple[tuple[Any, ...], ...]:
        """``Message.key()`` of every message, worked out once: a request is matched against its rollout's
        earlier calls, sized, and recorded, and each step compares the same keys."""
        if self._keys is None:
            object.__setattr__(self, "_keys", tuple(m.key() for m in self.messages))
        return self._keys  # type: ignore[return-value]

    def tools_key(self) -> bytes:
        """The tool definitions in canonical JSON: equal keys, equal tools (however a harness ordered them). Bytes,
        never decoded: a tool description with one emoji makes the text 4 bytes a character (2x the cost)."""
        if self.known_tools_key is None:
            object.__setattr__(self, "known_tools_key", json_bytes(list(self.tools), sort_keys=True))
        return self.known_tools_key  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Choice:
    """One generated answer, parsed out of the sampled ids."""

    index: int
    message: Message
    finish_reason: str
    sampled_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None = None
    tokens: list[str] | None = None


@dataclass(frozen=True, slots=True)
class Generation:
    """What a dialect renders: the choices, usage and the ids of the recorded calls."""

    id: str
    created: int
    model: str
    choices: list[Choice]
    prompt_tokens: int
    completion_tokens: int
    policy_version: int
    call_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """Logprobs of a run of sampled tokens, for the dialects that return them."""

    tokens: list[str]
    logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None = None


@dataclass(frozen=True, slots=True)
class StreamStart:
    """The upstream answered: ``generation`` has the id, model, prompt size and version, no choices yet."""

    generation: Generation


@dataclass(frozen=True, slots=True)
class TextDelta:
    """New text of one choice while it is sampled; ``channel`` is "reasoning" or "content"."""

    index: int
    channel: str
    text: str
    logprobs: TokenLogprobs | None = None


@dataclass(frozen=True, slots=True)
class ChoiceEnd:
    """A finished choice (sent once its call is committed) and the text its deltas had not shown yet."""

    choice: Choice
    tail: tuple[tuple[str, str], ...]
    """(channel, text) pairs, in order."""
    logprobs: TokenLogprobs | None = None


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """Every choice is committed; ``generation`` is complete (usage, call ids)."""

    generation: Generation
    body_text: str | None = None
    """The whole answer in the dialect's JSON, as recorded: a non-streamed client is sent exactly this (None in a
    replay, which only streams)."""


@dataclass(frozen=True, slots=True)
class StreamFailure:
    """The upstream failed mid-stream; nothing was recorded."""

    error: RollwireError


StreamEvent = StreamStart | TextDelta | ChoiceEnd | StreamEnd | StreamFailure


__all__ = [
    "Choice",
    "ChoiceEnd",
    "Conversation",
    "Generation",
    "Message",
    "OutputFormat",
    "Sampling",
    "StreamEnd",
    "StreamEvent",
    "StreamFailure",
    "StreamStart",
    "TextDelta",
    "TokenLogprobs",
    "ToolCall",
]
