"""Per-sequence output text and stop rules, following vLLM: eos, then ``stop_token_ids``, then ``max_tokens``,
then ``stop`` strings.

Token ids always keep every sampled token (the eos or stop token included); only the text changes: a stop
token's text is left out, and the text is cut where a stop string starts. While a stop string could still
be forming, the tail that might belong to it is held back from the stream, since a stream cannot retract.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollwire.engine.sampling import SamplingParams

PROMPT_CONTEXT_TOKENS = 5
"""Prompt tokens decoded as left context, so a tokenizer that spells spaces by context decodes the first token right."""


@dataclass(frozen=True, slots=True)
class Progress:
    """What one new token did to a sequence: the text to emit now and, if it ended, why."""

    text: str
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class SequenceText:
    """Incremental detokenizer plus stop checks for one sequence (vLLM's offset-window scheme)."""

    def __init__(self, tokenizer: Any, prompt_ids: list[int], params: SamplingParams, eos_ids: frozenset[int]) -> None:
        self._tokenizer = tokenizer
        self._params = params
        self._eos = frozenset() if params.ignore_eos else eos_ids
        self._ids = list(prompt_ids[-PROMPT_CONTEXT_TOKENS:])
        self._prefix = 0
        self._read = len(self._ids)
        self._text = ""
        self._emitted = 0
        self.generated = 0
        holding = params.stop and not params.include_stop_str_in_output
        self._hold = max(len(s) for s in params.stop) - 1 if holding else 0

    def _decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=self._params.skip_special_tokens))

    def _append(self, token_id: int) -> None:
        self._ids.append(token_id)
        before = self._decode(self._ids[self._prefix : self._read])
        after = self._decode(self._ids[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._text += after[len(before) :]
            self._prefix, self._read = self._read, len(self._ids)

    def _token_stop(self, token_id: int) -> tuple[str, int | None] | None:
        if token_id in self._eos:
            return "stop", None
        if token_id in self._params.stop_token_ids:
            return "stop", token_id
        return None

    def _string_stop(self, checked_from: int) -> str | None:
        for stop in self._params.stop:
            at = self._text.find(stop, max(0, checked_from - len(stop) + 1))
            if at >= 0:
                end = at + len(stop) if self._params.include_stop_str_in_output else at
                self._text = self._text[:end]
                return stop
        return None

    def add(self, token_id: int) -> Progress:
        """Account for one sampled token; returns the text delta and the finish reason if it ended here."""
        self.generated += 1
        token_stop = self._token_stop(token_id)
        checked_from = len(self._text)
        if token_stop is None or self._params.include_stop_str_in_output:
            self._append(token_id)
        if token_stop is not None:
            return self._emit(*token_stop)
        matched = self._string_stop(checked_from) if self._params.stop else None
        if matched is not None:
            return self._emit("stop", matched)
        if self.generated >= self._params.max_tokens:
            return self._emit("length", None)
        return self._emit(None, None)

    def _emit(self, finish_reason: str | None, stop_reason: int | str | None) -> Progress:
        upto = len(self._text) if finish_reason else max(self._emitted, len(self._text) - self._hold)
        delta = self._text[self._emitted : upto]
        self._emitted = upto
        return Progress(delta, finish_reason, stop_reason)


__all__ = ["Progress", "SequenceText"]
