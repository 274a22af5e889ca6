"""Token ids and logprobs survive the compact byte encoding exactly (logprobs at float32 precision)."""

from array import array

from hypothesis import given
from hypothesis import strategies as st

from rollwire.store import decode_floats, decode_ids, encode_floats, encode_ids


@given(st.lists(st.integers(min_value=0, max_value=2**31 - 1), max_size=300))
def test_ids_round_trip(ids: list[int]) -> None:
    data = encode_ids(ids)
    assert len(data) == 4 * len(ids)
    assert decode_ids(data) == ids


@given(st.lists(st.floats(min_value=-100, max_value=0, allow_nan=False, width=32), max_size=300))
def test_logprobs_round_trip_at_float32(values: list[float]) -> None:
    assert decode_floats(encode_floats(values)) == array("f", values).tolist() == values


def test_empty_and_none_decode_to_empty() -> None:
    assert decode_ids(b"") == [] and decode_ids(None) == [] and decode_floats(None) == []
