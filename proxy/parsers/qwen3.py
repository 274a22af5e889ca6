"""Qwen3 / DeepSeek-R1 style reasoning: ``<think>...</think>`` before the answer, as vLLM's qwen3 parser."""

from __future__ import annotations

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


class NoReasoningParser:
    def split(self, text: str) -> tuple[str | None, str]:
        return None, text


__all__ = ["NoReasoningParser", "Qwen3ReasoningParser"]
