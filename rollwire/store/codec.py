"""Compact encodings for token ids and logprobs: little-endian int32 / float32 bytes, never JSON lists."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, overload

ID_BYTES = 4
"""Bytes a stored token id takes (int32)."""


def _to_bytes(values: array[Any]) -> bytes:
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


def _from_bytes(typecode: str, data: bytes | None) -> array[Any]:
    values = array(typecode)
    if data:
        values.frombytes(data)
        if sys.byteorder != "little":
            values.byteswap()
    return values


def encode_ids(ids: Sequence[int]) -> bytes:
    if isinstance(ids, EncodedIds):
        return ids.data
    return _to_bytes(array("i", ids))


def decode_ids(data: bytes | None) -> list[int]:
    return _from_bytes("i", data).tolist()


class EncodedIds(Sequence[int]):
    """Token ids held as their encoding (``encode_ids``), made a list the first time one of them is read.

    A spliced prompt is an earlier call's encoding plus a few new ids (``rollwire.proxy.splice``); the proxy
    measures it, sends its JSON and stores its bytes, and reads its ids one by one only off the usual path (a
    derived seed, a re-render). Made a list on every call, a 128k-token context cost ~0.4 ms a call, and a list
    holds ~40 bytes an id where the encoding holds 4."""

    __slots__ = ("_ids", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._ids: list[int] | None = None

    def as_list(self) -> list[int]:
        """The ids as a list (decoded once)."""
        if self._ids is None:
            self._ids = decode_ids(self.data)
        return self._ids

    def __len__(self) -> int:
        return len(self.data) // ID_BYTES

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        return self.as_list()[index]

    def __iter__(self) -> Iterator[int]:
        return iter(self.as_list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EncodedIds):
            return self.data == other.data
        if isinstance(other, list):
            return self.as_list() == other
        return NotImplemented

    def __hash__(self) -> int:
        raise TypeError("unhashable type: 'EncodedIds' (it compares equal to a list, which is not hashable)")

    def __repr__(self) -> str:
        return f"EncodedIds({len(self)} ids)"


def encode_floats(values: list[float]) -> bytes:
    return _to_bytes(array("f", values))


def decode_floats(data: bytes | None) -> list[float]:
    return _from_bytes("f", data).tolist()


__all__ = ["ID_BYTES", "EncodedIds", "decode_floats", "decode_ids", "encode_floats", "encode_ids"]
