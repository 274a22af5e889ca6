"""Compact encodings for token ids and logprobs: little-endian int32 / float32 bytes, never JSON lists."""

from __future__ import annotations

import sys
from array import array
from typing import Any

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


def encode_ids(ids: list[int]) -> bytes:
    return _to_bytes(array("i", ids))


def decode_ids(data: bytes | None) -> list[int]:
    return _from_bytes("i", data).tolist()


def encode_floats(values: list[float]) -> bytes:
    return _to_bytes(array("f", values))


def decode_floats(data: bytes | None) -> list[float]:
    return _from_bytes("f", data).tolist()


__all__ = ["ID_BYTES", "decode_floats", "decode_ids", "encode_floats", "encode_ids"]
