"""Sampled ids -> the answer (text, reasoning, tool calls), as the ids arrive.

One path for streamed and whole answers: ``feed`` decodes new ids incrementally and returns the reasoning
and content that can no longer change (a half-sampled stop string, ``</think>`` or ``<tool_call>`` and
trailing whitespace wait); ``finish`` parses the whole text once, as a non-streamed answer always was, and
returns the final message plus what the stream has not shown yet. The final message is what the client
assembled from the stream, so a harness that sends it back still splices: reasoning streams only when the
answer opens with ``<think>`` (an empty reasoning delta says it opened), and once plain content was shown
the answer stays plain.
"""

from __future__ import annotations

from typing import Protocol

from rollwire.proxy.conversation import Message, ToolCall
from rollwire.proxy.parsers.base import ReasoningParser, ToolParser, partial_marker

REASONING = "reasoning"
CONTENT = "content"
Delta = tuple[str, str]
"""(REASONING or CONTENT, text)."""


class DecodeOps(Protocol):
    end_ids: frozenset[int]

    def decode(self, ids: list[int]) -> str: ...


def cut_at_stop(text: str, stops: tuple[str, ...]) -> str:
    """The answer ends before the first stop string, as OpenAI's (the sampled ids keep every token)."""
    cuts = [at for at in (text.find(s) for s in stops if s) if at >= 0]
    return text[: min(cuts)] if cuts else text


def _prefix_then(whole: str, shown: str) -> tuple[str, str]:
    """(the part ``whole`` adds after ``shown``, the final text): ``whole`` when it extends what was shown, else
    what was shown plus what follows its stripped form (a parser strips the content around tool calls)."""
    if whole.startswith(shown):
        return whole[len(shown) :], whole
    bare = shown.strip()
    if bare and whole.startswith(bare):
        tail = whole[len(bare) :]
        return tail, shown + tail
    return "", shown


class AnswerStream:
    """One choice's sampled ids, decoded and parsed incrementally (see the module docstring)."""

    def __init__(
        self,
        ops: DecodeOps,
        reasoning: ReasoningParser,
        tools: ToolParser | None,
        stops: tuple[str, ...] = (),
        prefill: str = "",
        parallel_tool_calls: bool = True,
    ) -> None:
        self.ops = ops
        self.reasoning = reasoning
        self.tools = tools
        self.stops = tuple(s for s in stops if s)
        self.prefill = prefill
        self.parallel = parallel_tool_calls
        self.ids: list[int] = []
        self._body: list[int] = []
        self._prefix = 0
        self._read = 0
        self._decoded = ""
        self.shown_reasoning: str | None = None
        self.shown_content = ""

    def feed(self, ids: list[int]) -> list[Delta]:
        """Take newly sampled ids; return the deltas that are now certain."""
        self.ids.extend(ids)
        self._body.extend(i for i in ids if i not in self.ops.end_ids)  # the engine stops at an end id
        self._decode()
        return self._show(*self._view(self.prefill + self._decoded))

    def finish(self, cut_off: bool = False) -> tuple[Message, list[Delta]]:
        """The final message, parsed from the whole text, and the deltas the stream still owes. ``cut_off``: the
        length limit ended the answer; a call the request forced (the prefill opened it) that did not close is
        dropped, never handed back as text (the finish reason says what happened)."""
        ids = self.ids
        body = ids[:-1] if ids and ids[-1] in self.ops.end_ids else ids
        text = cut_at_stop(self.prefill + self.ops.decode(body), self.stops)
        if self._plain():
            thought, rest = None, text
        else:
            thought, rest = self.reasoning.split(text)
            if thought is None and self.shown_reasoning is not None:  # cut off while thinking: stays reasoning
                thought, rest = self.reasoning.partial(text)[0], ""
        calls: list[ToolCall] = []
        if self.tools is not None:
            rest, calls = self.tools.parse(rest)
            if cut_off and self.prefill:
                rest = rest[: self.tools.holdback(rest)].rstrip()
            if not self.parallel:
                calls = calls[:1]
        deltas: list[Delta] = []
        if thought is not None and self.shown_reasoning is not None:
            tail, thought = _prefix_then(thought, self.shown_reasoning)
            if tail:
                deltas.append((REASONING, tail))
        elif thought:
            deltas.append((REASONING, thought))
        tail, content = _prefix_then(rest, self.shown_content)
        if tail:
            deltas.append((CONTENT, tail))
        return Message(role="assistant", content=content, reasoning=thought, tool_calls=tuple(calls)), deltas

    def _plain(self) -> bool:
        """Content was shown before any reasoning: the answer is plain text from then on."""
        return bool(self.shown_content) and self.shown_reasoning is None

    def _decode(self) -> None:
        """Incremental detokenization (vLLM's offsets): decode a short window and wait on split UTF-8 bytes."""
        before = self.ops.decode(self._body[self._prefix : self._read])
        after = self.ops.decode(self._body[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._decoded += after[len(before) :]
            self._prefix, self._read = self._read, len(self._body)

    def _view(self, text: str) -> tuple[str | None, str]:
        """What of ``text`` can be shown now, as (reasoning, content)."""
        cut = cut_at_stop(text, self.stops)
        if cut == text and self.stops:
            cut = text[: min(partial_marker(text, s) for s in self.stops)]
        thought, content = (None, cut) if self._plain() else self.reasoning.partial(cut)
        if self.tools is not None:
            content = content[: self.tools.holdback(content)]
        return thought, content.rstrip()

    def _show(self, thought: str | None, content: str) -> list[Delta]:
        out: list[Delta] = []
        if thought is not None and not self.shown_content:
            if self.shown_reasoning is None:  # reasoning opens (possibly empty so far): dialects open its block
                out.append((REASONING, ""))
                self.shown_reasoning = ""
            if thought.startswith(self.shown_reasoning) and len(thought) > len(self.shown_reasoning):
                out.append((REASONING, thought[len(self.shown_reasoning) :]))
                self.shown_reasoning = thought
        if content.startswith(self.shown_content) and len(content) > len(self.shown_content):
            out.append((CONTENT, content[len(self.shown_content) :]))
            self.shown_content = content
        return out


__all__ = ["CONTENT", "REASONING", "AnswerStream", "DecodeOps", "Delta", "cut_at_stop"]
