"""A continuing call's row keeps only what follows the call it continues; every reader gets the whole prompt back
(``rollwire.store.prompts``), or a clear error where the call it continues is gone."""

from __future__ import annotations

import pytest

from rollwire.errors import StoreError
from rollwire.store import ModelCall, decode_ids, encode_ids
from rollwire.store.prompts import prompt_length, stored_prompt, whole_prompts


def _call(call_id: int, whole: list[int], sampled: list[int], base: int | None = None, reused: int = 0) -> ModelCall:
    """A row as the proxy writes it: ``whole`` is the call's whole prompt."""
    stored = stored_prompt(encode_ids(whole), base, reused)
    return ModelCall(
        id=call_id, rollout_id="r", prompt_ids=stored, prompt_base=base, reused_prefix_len=reused,
        completion_ids=encode_ids(sampled),
    )  # fmt: skip


def test_a_chain_of_continuing_calls_reads_back_whole_in_any_order() -> None:
    first = _call(1, [1, 2, 3], [4, 5])
    second = _call(2, [1, 2, 3, 4, 5, 6], [7], base=1, reused=5)
    third = _call(3, [1, 2, 3, 4, 5, 6, 7, 8, 9], [10], base=2, reused=7)
    branch = _call(4, [1, 2, 3, 4, 5, 11], [12], base=1, reused=5)  # a second call continuing the first
    fresh = _call(5, [20, 21], [22])  # a new segment: stored whole
    assert decode_ids(third.prompt_ids) == [8, 9] and decode_ids(fresh.prompt_ids) == [20, 21]
    calls = [third, fresh, branch, first, second]
    assert [decode_ids(p) for p in whole_prompts(calls)] == [
        [1, 2, 3, 4, 5, 6, 7, 8, 9], [20, 21], [1, 2, 3, 4, 5, 11], [1, 2, 3], [1, 2, 3, 4, 5, 6],
    ]  # fmt: skip
    assert [prompt_length(c.prompt_ids, c.prompt_base, c.reused_prefix_len) for c in calls] == [9, 2, 6, 3, 6]


def test_a_call_read_earlier_opens_the_prompt_of_one_read_now() -> None:
    """A process that holds call 2 reads only call 3, written by another process."""
    third = _call(3, [1, 2, 3, 4, 5, 6, 7, 8, 9], [10], base=2, reused=7)
    assert decode_ids(whole_prompts([third], {2: encode_ids([1, 2, 3, 4, 5, 6, 7])})[0]) == list(range(1, 10))


def test_a_missing_or_shorter_base_is_a_clear_store_error() -> None:
    third = _call(3, [1, 2, 3, 4, 5, 6, 7, 8, 9], [10], base=2, reused=7)
    with pytest.raises(StoreError, match="call 3's prompt continues call 2, which is not in the store"):
        whole_prompts([third])
    with pytest.raises(StoreError, match="continues call 2's 7 ids, but that call holds 6"):
        whole_prompts([third], {2: encode_ids([1, 2, 3, 4, 5, 6])})


def test_rows_without_ids_are_read_as_stored() -> None:
    """Rows built in memory (a bench, a test) have no ids yet; whole prompts are theirs as they are."""
    rows = [ModelCall(rollout_id="r", prompt_ids=encode_ids([1, 2])), ModelCall(rollout_id="r", prompt_ids=b"")]
    assert [decode_ids(p) for p in whole_prompts(rows)] == [[1, 2], []]
