"""Request bodies are parsed by orjson where it reads exactly what the standard library reads, and by the
standard library everywhere else: the value (types included) and every refusal stay the standard library's."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollwire.errors import InvalidRequest
from rollwire.request_body import MAX_DEPTH, WALKED_BYTES, _no_constant, check_json_value, parse_json

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()  # past 64 bits too: orjson would read those as floats
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()  # lone surrogates included: json.dumps escapes them, orjson refuses them
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=30)


def _same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down (1 is not 1.0, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


@settings(max_examples=400, deadline=None)
@given(VALUES, st.booleans())
def test_a_body_parses_to_what_the_standard_library_reads(value: Any, ascii_only: bool) -> None:
    try:
        raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    except UnicodeEncodeError:  # a lone surrogate cannot be UTF-8: no client can send that body
        return
    assert _same(parse_json(bytearray(raw)).value, json.loads(raw, parse_constant=_no_constant))


def _large(raw: bytes) -> bytes:
    """``raw`` (a JSON value) inside a body past ``WALKED_BYTES``, where the parse looks for inexact numbers in its
    walk of the nesting instead of in the bytes."""
    return b'{"pad": "' + b"x" * WALKED_BYTES + b'", "v": ' + raw + b"}"


@settings(max_examples=200, deadline=None)
@given(VALUES, st.booleans())
def test_a_large_body_parses_to_what_the_standard_library_reads(value: Any, ascii_only: bool) -> None:
    try:
        raw = _large(json.dumps(value, ensure_ascii=ascii_only).encode())
    except UnicodeEncodeError:
        return
    assert _same(parse_json(bytearray(raw)).value, json.loads(raw, parse_constant=_no_constant))


@pytest.mark.parametrize(
    ("number", "by_orjson"),
    [
        (b"123456789012345678901234567890", False),  # past 64 bits: orjson would read a float
        (b"-9223372036854775809", False),
        (b"18446744073709551615", True),  # the widest integer orjson keeps exact
        (b"-9223372036854775808", True),
        (b"1e19", False),  # a float as wide: read again by the standard library, to the same value
        (b"12345.5", True),
    ],
)
def test_a_large_body_with_wide_numbers_deep_inside_is_the_standard_librarys(number: bytes, by_orjson: bool) -> None:
    raw = _large(b'[{"a": [[' + number + b"]]}]")
    value, paired, shallow = parse_json(bytearray(raw))
    assert _same(value, json.loads(raw)) and (paired, shallow) == (by_orjson, True if by_orjson else None)


@settings(max_examples=400, deadline=None)
@given(VALUES, st.booleans())
def test_a_body_orjson_reads_holds_no_lone_surrogate(value: Any, ascii_only: bool) -> None:
    """What lets ``check_json_value`` skip its look for lone surrogates in a body orjson parsed (``paired``)."""
    try:
        raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    except UnicodeEncodeError:
        return
    parsed, paired, _ = parse_json(bytearray(raw))
    if paired:
        json.dumps(parsed, ensure_ascii=False).encode()  # no UnicodeEncodeError: every surrogate was paired


@pytest.mark.parametrize(
    ("raw", "refused"),
    [
        (b'{"s": "\\ud83e\\udd16 Generated"}', False),  # an emoji, escaped as Python's json.dumps writes it
        (b'{"s": "\\ud800"}', True),
        (b'{"s": "\\udd16\\ud83e"}', True),
        (b'{"s": "\\ud83e\\u0041"}', True),
        (b'{"s": "\\\\ud83e\\udd16"}', True),  # an escaped backslash, then a lone low surrogate
        (b'{"\\ud800": 1}', True),
    ],
    ids=["pair", "lone high", "reversed pair", "high then a letter", "after an escaped backslash", "in a key"],
)
def test_lone_surrogates_are_refused_and_pairs_are_not(raw: bytes, refused: bool) -> None:
    parsed, paired, _ = parse_json(bytearray(raw))
    assert paired is not refused  # orjson reads the pair and refuses every lone one
    if refused:
        with pytest.raises(InvalidRequest, match="lone UTF-16 surrogate"):
            check_json_value(parsed, raw, paired=paired)
    else:
        check_json_value(parsed, raw, paired=paired)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"seed": 123456789012345678901234567890}',
        b'{"seed": 18446744073709551615, "x": -9223372036854775808}',
        b'{"a": 1, "a": 2}',
        b'{"t": 1e400}',
        b'{"s": "\\ud800"}',
        b'\xef\xbb\xbf{"a": 1}',
        '{"a": "\u00e9"}'.encode("utf-16"),
        b"[" * 2000 + b"]" * 2000,
    ],
    ids=[
        "past 64 bits",
        "64-bit edges",
        "duplicate key",
        "overflowing float",
        "lone surrogate",
        "BOM",
        "UTF-16",
        "past orjson's depth",
    ],
)
def test_what_orjson_reads_differently_or_refuses_is_the_standard_librarys(raw: bytes) -> None:
    try:
        expected: Any = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        with pytest.raises(type(exc)):
            parse_json(bytearray(raw)).value
        return
    assert _same(parse_json(bytearray(raw)).value, expected)


@pytest.mark.parametrize("raw", [b'{"t": NaN}', b'{"t": -Infinity}', b'{"a": }', b"", b'{"a": "\xff"}'])
def test_what_neither_reads_is_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        parse_json(bytearray(raw)).value


def _nested(depth: int) -> str:
    """``depth`` levels of alternating objects and arrays around a number, and a wide sibling at the top."""
    text = "1"
    for level in range(depth - 1):
        text = f'{{"k": {text}}}' if level % 2 else f"[{text}]"
    return f'{{"deep": {text}, "wide": [{", ".join(["[]"] * 200)}]}}'


@pytest.mark.parametrize(("depth", "refused"), [(MAX_DEPTH, False), (MAX_DEPTH + 1, True), (MAX_DEPTH + 40, True)])
@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
def test_nesting_is_refused_just_past_the_limit(depth: int, refused: bool, large: bool) -> None:
    """A small body's nesting is walked by the check, a large one's by the parse (``parse_json``): the same limit."""
    raw = _nested(depth).encode()
    if large:
        raw = raw[:-1] + b', "pad": "' + b"x" * WALKED_BYTES + b'"}'
    parsed, paired, shallow = parse_json(bytearray(raw))
    assert shallow is (None if not large else not refused)
    if refused:
        with pytest.raises(InvalidRequest, match=f"nested deeper than {MAX_DEPTH} levels"):
            check_json_value(parsed, raw, paired=paired, shallow=shallow)
    else:
        check_json_value(parsed, raw, paired=paired, shallow=shallow)
