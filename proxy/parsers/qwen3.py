"""Qwen3 / DeepSeek-R1 style reasoning: ``<think>...</think>`` before the answer, as vLLM's qwen3 parser."""

from __future__ import annotations

from rollwire.proxy.parsers.base import partial_marker

START = "<think>"
END = "</think>"


class Qwen3ReasoningParser:
    def split(self, text: str) -> tuple[str | None, str]:
        """Without a closing ``</think>`` the whole text is content (vLLM's rule)."""
        if END not in text:
            return None, text
        before, _, after = text.partition(END)
        reasoning = before.split(START, 1)[1] if START in before else before
        return reasoning.strip("\n"), after.lstrip("\n")

    def partial(self, text: str) -> tuple[str | None, str]:
        """Reasoning streams only when the answer opens with ``<think>``; until then nothing is decided."""
        if END in text:
            return self.split(text)
        head = text.lstrip()
        if head.startswith(START):
            thought = text.split(START, 1)[1].lstrip("\n")
            return thought[: partial_marker(thought, END)].rstrip("\n"), ""
        if START.startswith(head):
            return None, ""
        return None, text


class NoReasoningParser:
    def split(self, text: str) -> tuple[str | None, str]:
        return None, text

    def partial(self, text: str) -> tuple[str | None, str]:
        return None, text


__all__ = ["NoReasoningParser", "Qwen3ReasoningParser"]
