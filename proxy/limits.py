"""Output caps: the rules every dialect's request goes through before the upstream sees it. Admission applies the
operator's default and the rollout's token budget (``capped``); preparing fits the cap to the context
(``fit_output``).

Harnesses send output caps as a ceiling, not a need (Claude Code asks for ``max_tokens: 64000`` whatever
the model), and vLLM refuses a prompt + cap past the context outright. So a cap larger than what is left of
the context is clamped to it, and both numbers are recorded on the call; an unset cap is the rest of the
context (as OpenAI and vLLM's chat route do). Only a prompt that alone fills the context is refused: there is
no room for a single output token, and no cap could fix that.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rollwire.errors import InvalidRequest
from rollwire.proxy.conversation import Conversation


class ContextExceeded(InvalidRequest):
    """A 400 in every dialect's own error shape (``invalid_request_error``); the message names both numbers."""


@dataclass(frozen=True, slots=True)
class OutputCap:
    """The output cap a request asked for (None: it set none) and the one the upstream is sent."""

    requested: int | None
    granted: int | None

    @property
    def clamped(self) -> bool:
        return self.requested is not None and self.granted is not None and self.granted < self.requested


def capped(conv: Conversation, cap: int | None) -> Conversation:
    """``conv`` with at most ``cap`` output tokens (unchanged where it already asks for no more; the recorded
    request stays as sent)."""
    asked = conv.sampling.max_tokens
    if cap is None or (asked is not None and asked <= cap):
        return conv
    return replace(conv, sampling=replace(conv.sampling, max_tokens=cap))


def fit_output(requested: int | None, prompt_len: int, context: int | None) -> OutputCap:
    """``requested`` fitted into what ``context`` leaves after ``prompt_len`` tokens; unknown context: unchanged."""
    if not context:
        return OutputCap(requested, requested)
    left = context - prompt_len
    if left < 1:
        raise ContextExceeded(
            f"the prompt is {prompt_len} tokens, but the model's context is {context} tokens: no room for any "
            "output (shorten the conversation or serve the model with a longer context)"
        )
    return OutputCap(requested, left if requested is None else min(requested, left))


__all__ = ["ContextExceeded", "OutputCap", "capped", "fit_output"]
