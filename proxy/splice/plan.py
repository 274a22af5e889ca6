"""Session splicing: a request that extends an earlier call of its rollout reuses that call's exact ids.

The prompt is the earlier call's prompt ids + its sampled ids + only the newly rendered tail, so what the
engine sees (and what training uses) is never a re-tokenization of sampled text. When the history was
rewritten, or under the ``render`` policy when the template's re-render differs, the call starts a new
segment and says why. Pure but for today's date (a template may print it): the template operations come in
as an object.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import Any, Protocol

from rollwire.compact_json import json_bytes, json_ids_extended, json_text
from rollwire.proxy.conversation import Conversation
from rollwire.side_calls import MAIN
from rollwire.store.codec import EncodedIds, encode_ids
from rollwire.store.requests import SentRequest

POLICIES = ("splice", "render")

MARKER = "\u2063rollwire-splice-marker\u2063"
"""Content of a stand-in assistant message; the tail is what the template renders after it."""


class TemplateOps(Protocol):
    end_ids: frozenset[int]
    end_text: str

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], add_generation_prompt: bool, **kwargs: Any
    ) -> str: ...

    def encode(self, text: str) -> list[int]: ...

    def encode_rendered(self, key: Hashable, render: Callable[[], str]) -> tuple[list[int], bytes]:
        """``encode(render())`` for a whole prompt and those ids as the store encodes them (one that may well come
        again, and may be remembered by ``key``, which decides the text ``render`` makes)."""
        ...

    def remembers(self, key: Hashable) -> bool:
        """Whether ``encode_rendered`` has the ids for ``key`` already (nothing to render or encode)."""
        ...


@dataclass(frozen=True, slots=True)
class PriorCall:
    """An earlier answered call of the same rollout (one choice of it)."""

    call_id: int
    request_keys: tuple[Any, ...]
    tools_key: bytes
    answer_key: Any
    prompt_ids: Sequence[int]
    """A list, or the ids' encoding (``EncodedIds``) where the call was spliced or read back."""
    sampled_ids: list[int]
    segment_index: int
    continued: bool
    """A later call already continues this one's segment."""
    prompt_blob: bytes | None = None
    """``prompt_ids`` as the store encodes them (``rollwire.store.codec``), where known: a call that splices onto
    this one encodes its whole prompt as this + the sampled ids' and its tail's encodings, in one copy (what it
    holds as a prior in turn, uncopied), not the whole prompt encoded again (~10 ns an id: 0.3 ms a call at a
    32k-token context)."""
    prompt_json: bytes | None = None
    """``prompt_ids`` as the upstream request wrote them (a JSON array), where known: a call that splices onto this
    one writes its prompt as this + the sampled ids and its tail (``json_ids_extended``, one copy). Held only while
    the call is its segment's latest (``Known.learn``), the one a next call continues."""
    request_sent: SentRequest | None = None
    """The call's whole request as sent, where known: a call that continues this one stores its own request as an
    edit of it (``rollwire.store.requests``). Held, as ``prompt_json``, only while the call is its segment's latest."""
    line: str = MAIN
    """The call's line (``rollwire.side_calls``): a call that continues this one keeps it."""

    def ids_blob(self) -> bytes | None:
        """``prompt_ids + sampled_ids`` as the store encodes them, where the prompt's encoding is held."""
        return None if self.prompt_blob is None else self.prompt_blob + encode_ids(self.sampled_ids)


@dataclass(frozen=True, slots=True)
class Plan:
    prompt_ids: Sequence[int]
    """A list, or for a splice the encoding ``prompt_blob`` holds (``EncodedIds``: no list is made of a long
    context that is only measured, sent and stored)."""
    segment_index: int
    segment_break: str | None
    reused_prefix_len: int
    spliced_from: int | None = None
    next_free: int = 0
    """The lowest segment index no call uses yet (for sibling choices of an n>1 request)."""
    prompt_blob: bytes | None = None
    """``prompt_ids`` as the store encodes them, where a splice made them cheaply (see ``PriorCall.prompt_blob``)."""
    prompt_json: bytes | None = None
    """``prompt_ids`` as a JSON array, where a splice made them cheaply (see ``PriorCall.prompt_json``)."""

    def encoded_prompt(self) -> bytes:
        """The whole prompt's ids in the store's encoding (``rollwire.store.codec``)."""
        return self.prompt_blob if self.prompt_blob is not None else encode_ids(self.prompt_ids)

    def json_prompt(self) -> bytes:
        """The whole prompt's ids as the upstream request writes them (``json_bytes``)."""
        if self.prompt_json is not None:
            return self.prompt_json
        ids = self.prompt_ids
        return json_bytes(ids.as_list() if isinstance(ids, EncodedIds) else ids)


def _extends(conv: Conversation, prior: PriorCall) -> bool:
    keys = conv.message_keys()
    k = len(prior.request_keys)
    return (
        len(keys) > k
        and keys[:k] == prior.request_keys
        and keys[k] == prior.answer_key
        and conv.tools_key() == prior.tools_key
    )


def _why_not(conv: Conversation, prior: PriorCall) -> str:
    """A readable reason why ``conv`` does not continue ``prior``."""
    keys = conv.message_keys()
    k = len(prior.request_keys)
    if conv.tools_key() != prior.tools_key:
        return f"tools changed since call {prior.call_id}"
    for i, (old, new) in enumerate(zip(prior.request_keys, keys)):
        if old != new:
            return f"history rewritten: message {i} differs from call {prior.call_id}'s request"
    if len(keys) <= k:
        return f"history shortened: {len(keys)} messages, call {prior.call_id} had {k}"
    return f"assistant message {k} is not call {prior.call_id}'s answer as sampled"


def tail_text(ops: TemplateOps, conv: Conversation, start: int, ended: bool) -> str | None:
    """Text after a sampled answer that ended (``ended``: with an end-of-turn token) up to the generation prompt.

    Renders a stand-in user/assistant pair + messages[start:] and cuts after the stand-in's turn, so how the
    template re-renders earlier turns (dropped reasoning, reformatted tool calls) does not matter.
    """
    stand_in = [{"role": "user", "content": "."}, {"role": "assistant", "content": MARKER}]
    tail = [m.to_template() for m in conv.messages[start:]]
    full = ops.render(stand_in + tail, list(conv.tools), True, **conv.template_kwargs())
    at = full.find(MARKER)
    if at < 0:
        return None
    after = full[at + len(MARKER) :]
    end = after.find(ops.end_text)
    if end < 0:
        return None
    close_end = end + len(ops.end_text)
    while close_end < len(after) and after[close_end] == "\n":
        close_end += 1
    close = after[end:close_end] if not ended else after[end + len(ops.end_text) : close_end]
    return close + after[close_end:]


def continued_call(conv: Conversation, priors: list[PriorCall]) -> PriorCall | None:
    """The latest earlier call that ``conv`` continues (its messages and answer, then new ones), if any: a walk
    over the conversation's messages, so a caller that plans (``encode_work``, then ``plan_prompt``) finds it once
    and hands it to both."""
    return next((p for p in reversed(priors) if _extends(conv, p)), None)


Continued = PriorCall | None | EllipsisType
"""The call a conversation continues, None for none, or ``...``: not looked for yet (``continued_call``)."""


def _next_segment(priors: list[PriorCall]) -> int:
    return max((p.segment_index for p in priors), default=-1) + 1


def _splice(
    conv: Conversation, priors: list[PriorCall], ops: TemplateOps, prefill: str, continued: Continued
) -> Plan | None:
    prior = continued_call(conv, priors) if continued is ... else continued
    if prior is None:
        return None
    ended = bool(prior.sampled_ids) and prior.sampled_ids[-1] in ops.end_ids
    text = tail_text(ops, conv, len(prior.request_keys) + 1, ended)
    if text is None:
        return None
    tail = ops.encode(text + prefill)
    reused = len(prior.prompt_ids) + len(prior.sampled_ids)
    added = [*prior.sampled_ids, *tail]
    blob = b"".join((prior.prompt_blob, encode_ids(added))) if prior.prompt_blob is not None else None
    prompt = EncodedIds(blob) if blob is not None else [*prior.prompt_ids, *added]
    written = json_ids_extended(prior.prompt_json, added) if prior.prompt_json is not None else None
    if prior.continued:
        reason = f"branches from call {prior.call_id}, whose segment was already continued"
        return Plan(prompt, _next_segment(priors), reason, reused, prior.call_id, prompt_blob=blob, prompt_json=written)
    return Plan(prompt, prior.segment_index, None, reused, prior.call_id, prompt_blob=blob, prompt_json=written)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def whole_prompt(conv: Conversation, ops: TemplateOps, prefill: str) -> list[int]:
    """The ids of ``conv`` rendered whole (with ``prefill`` after the generation prompt)."""
    return _whole(conv, ops, prefill)[0]


def _whole(conv: Conversation, ops: TemplateOps, prefill: str) -> tuple[list[int], bytes]:
    """``whole_prompt`` and its ids as the store encodes them."""

    def render() -> str:
        messages = [m.to_template() for m in conv.messages]
        return ops.render(messages, list(conv.tools), True, **conv.template_kwargs()) + prefill

    return ops.encode_rendered(_whole_key(conv, prefill), render)


def _whole_key(conv: Conversation, prefill: str) -> Hashable:
    """What a whole prompt's text depends on: every field of every message, the tools as sent (templates keep
    their order), the template's switches, and the date (templates may print today's: ``strftime_now``)."""
    return (conv.messages, json_text(list(conv.tools)), conv.reasoning, prefill, time.strftime("%Y-%m-%d"))


def _rendered(conv: Conversation, priors: list[PriorCall], ops: TemplateOps, prefill: str, policy: str) -> Plan:
    prompt, blob = _whole(conv, ops, prefill)
    if not priors:
        return Plan(prompt, 0, None, 0, prompt_blob=blob)
    heads = [p for p in priors if not p.continued]
    for prior in reversed(heads):
        reused = [*prior.prompt_ids, *prior.sampled_ids]
        if prompt[: len(reused)] == reused:
            return Plan(prompt, prior.segment_index, None, len(reused), prior.call_id, prompt_blob=blob)
    last = priors[-1]
    if policy == "splice":
        reason = _why_not(conv, last)
    else:
        at = _common_prefix(prompt, [*last.prompt_ids, *last.sampled_ids])
        reason = f"re-rendered prompt diverges from call {last.call_id}'s tokens at position {at}"
    return Plan(prompt, _next_segment(priors), reason, 0, prompt_blob=blob)


def _chars(messages: tuple[Any, ...] | list[Any]) -> int:
    return sum(len(m.content) + len(m.reasoning or "") + sum(len(c.arguments) for c in m.tool_calls) for m in messages)


def encode_work(
    conv: Conversation, priors: list[PriorCall], policy: str, ops: TemplateOps, prefill: str, continued: Continued = ...
) -> int:
    """About how many characters planning ``conv`` will render and encode: a splice encodes only the new tail,
    a whole prompt already remembered nothing (a group's rollouts start from one prompt)."""
    if policy == "splice":
        prior = continued_call(conv, priors) if continued is ... else continued
        if prior is not None:
            return _chars(conv.messages[len(prior.request_keys) + 1 :])
    if ops.remembers(_whole_key(conv, prefill)):
        return 0
    return _chars(conv.messages) + (len(conv.tools_key()) if conv.tools else 0)


def plan_prompt(
    conv: Conversation, priors: list[PriorCall], ops: TemplateOps, policy: str, prefill: str = "",
    continued: Continued = ...,
) -> Plan:  # fmt: skip
    """The prompt ids for ``conv`` and the segment they belong to, under ``policy`` (splice or render);
    ``continued``: ``continued_call``'s answer, where the caller has it."""
    plan = _splice(conv, priors, ops, prefill, continued) if policy == "splice" else None
    if plan is None:
        plan = _rendered(conv, priors, ops, prefill, policy)
    free = max(_next_segment(priors), plan.segment_index + 1)
    return Plan(
        plan.prompt_ids, plan.segment_index, plan.segment_break, plan.reused_prefix_len, plan.spliced_from, free,
        plan.prompt_blob, plan.prompt_json,
    )  # fmt: skip


__all__ = [
    "MARKER", "POLICIES", "Continued", "Plan", "PriorCall", "TemplateOps", "continued_call", "encode_work", "plan_prompt",
    "tail_text", "whole_prompt",
]  # fmt: skip
