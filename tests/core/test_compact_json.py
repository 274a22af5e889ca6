"""compact_json: appending ids to a JSON array written earlier gives the bytes of writing the whole list."""

from __future__ import annotations

import orjson
import pytest

from rollwire.compact_json import json_bytes, json_ids_extended


@pytest.mark.parametrize(
    ("ids", "more"),
    [([1, 2, 3], [4, 5]), ([7], []), ([], [8, 9]), ([], []), ([151643], [0]), (list(range(5000)), [-1, 2**31 - 1])],
)
def test_extending_written_ids_is_writing_them_whole(ids: list[int], more: list[int]) -> None:
    extended = json_ids_extended(json_bytes(ids), more)
    assert extended == json_bytes(ids + more)
    assert orjson.loads(extended) == ids + more
    assert isinstance(extended, bytes)
