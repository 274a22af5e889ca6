"""A model call's prompt as the store keeps it: whole, or only what follows the earlier call it continues.

A call that continues an earlier call of its rollout (a splice, ``proxy/splice/plan.py``) sends that call's prompt,
then its sampled ids, then a new tail. Stored whole, each call of an agent's rollout would write its whole
context again, so a rollout's rows grow with the square of its turns (30 calls at a 32k-token context: ~3.8 MB
of ids, where ~130 kB hold them all) and every call writes, logs and checkpoints all of it. Such a call keeps
only its tail: ``ModelCall.prompt_base`` names the call it continues and ``reused_prefix_len`` says how many ids
come from there. Every writer and reader of ``ModelCall.prompt_ids`` goes through here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rollwire.errors import StoreError
from rollwire.store.codec import ID_BYTES
from rollwire.store.schema import ModelCall


def stored_prompt(whole: bytes, base: int | None, reused: int) -> bytes:
    """What a call's row keeps of its ``whole`` prompt (stored bytes): all of it, or the ids after the ``reused``
    that come from the call ``base``."""
    return whole if base is None else whole[reused * ID_BYTES :]


def prompt_length(stored: bytes | None, base: int | None, reused: int) -> int:
    """How many ids a call's whole prompt holds, from its row's fields (nothing to read back)."""
    return (reused if base is not None else 0) + len(stored or b"") // ID_BYTES


def whole_prompts(calls: Sequence[ModelCall], known: Mapping[int, bytes] | None = None) -> list[bytes]:
    """Each call's whole prompt (stored bytes), in the order of ``calls``.

    A call that continues another takes that call's whole prompt and sampled ids, from ``calls`` or from ``known``
    (call id -> those ids as stored, for calls read earlier). A continued call was committed before the call that
    continues it was planned, so its id is the smaller. ``StoreError`` when it is in neither, or its ids are not
    as many as the continuing call took from it.
    """
    opened: dict[int, bytes] = dict(known or {})
    """Call id -> its whole prompt + sampled ids: what a call continuing it starts with."""
    whole: dict[int, bytes] = {}
    for call in sorted((c for c in calls if c.id is not None), key=lambda c: c.id or 0):
        whole[call.id or 0] = prompt = _whole(call, opened)
        opened[call.id or 0] = prompt + bytes(call.completion_ids or b"")
    return [whole[c.id] if c.id is not None else _whole(c, opened) for c in calls]


def _whole(call: ModelCall, opened: Mapping[int, bytes]) -> bytes:
    stored = bytes(call.prompt_ids or b"")
    if call.prompt_base is None:
        return stored
    head = opened.get(call.prompt_base)
    if head is None:
        raise StoreError(f"call {call.id}'s prompt continues call {call.prompt_base}, which is not in the store")
    if len(head) != call.reused_prefix_len * ID_BYTES:
        raise StoreError(
            f"call {call.id}'s prompt continues call {call.prompt_base}'s {call.reused_prefix_len} ids, "
            f"but that call holds {len(head) // ID_BYTES}"
        )
    return head + stored


__all__ = ["prompt_length", "stored_prompt", "whole_prompts"]
