"""Reading a JSON request body under a size limit, shared by every HTTP service (engine, proxy).

The size is checked before parsing: a declared Content-Length over the limit is refused at once, and a
streamed body is cut off as soon as it passes the limit, so an oversized upload never sits in memory.
What a strict JSON parser refuses is refused here too, as a 400 rather than a crash further in: the
non-JSON constants ``NaN``/``Infinity``, nesting deeper than ``MAX_DEPTH`` (deep bodies exhaust the recursion
of every later step: hashing, templates, storage) and lone UTF-16 surrogates (``"\\ud800"`` parses, but is not
text: it cannot be tokenized, encoded or stored).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from itertools import chain, compress, repeat
from operator import is_
from typing import Any, NamedTuple

import orjson
from starlette.requests import Request

from rollwire.errors import InvalidRequest, PayloadTooLarge

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects accepted (real tool schemas stay well under 20)."""

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""In a body that is strict UTF-8, only a ``\\uD800``-``\\uDFFF`` escape can put a surrogate into the parsed text
(``json.loads`` decodes bytes with ``surrogatepass``, so a body that is not strict UTF-8 is always checked)."""


_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
"""Every ASCII digit to ``0``, everything else to a space (``bytes.translate``)."""
_LONG_NUMBER = b"0" * 19
"""A digit run orjson may not keep exact (it reads integers past 64 bits as floats; the standard library keeps
them). Looked for in a small body with its digits mapped to ``0``: a regular expression's scan of a harness's
17 kB body took ~160 us (20x orjson's parse of it), the mapping and search ~7 us."""
_WIDE = float(2**63)
"""A parsed float at least this large may be an integer literal orjson read past 64 bits: in a large body it is
looked for during the walk that checks the nesting (``walk``), where mapping the body cost ~130 us at 230 kB."""
WALKED_BYTES = 16 * 1024
"""Past this size, a body's nesting is walked without counting its brackets first, and that walk also looks for
numbers orjson may have read inexactly (in place of the digit search)."""


class Parsed(NamedTuple):
    """A body parsed (``parse_json``)."""

    value: Any
    paired: bool
    """orjson read it: then every ``\\uD800``-``\\uDFFF`` escape in it was one half of a pair (orjson refuses a lone
    one, and a body that is not strict UTF-8)."""
    shallow: bool | None
    """Its nesting is within ``MAX_DEPTH``, where that was walked (a large body's); None where not walked."""


BodyParser = Callable[[bytes], Parsed]
"""How a service parses the bytes of a body (``parse_json``, or a memo in front of it)."""


def parse_json(body: bytes | bytearray) -> Parsed:
    """``body`` parsed: by orjson (~5x faster on a harness's request) where it parses to exactly what the standard
    library would; everything it refuses or may read differently (long numbers, UTF-16/32, a BOM, lone
    surrogates, ``NaN``) goes to the standard library, whose value or error is then the answer."""
    large = len(body) > WALKED_BYTES
    if large or _LONG_NUMBER not in body.translate(_DIGITS):
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            if not large:
                return Parsed(value, True, None)
            shallow, wide = walk(value)
            if not wide:
                return Parsed(value, True, shallow)
    return Parsed(json.loads(body, parse_constant=_no_constant), False, None)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_CONTAINER = frozenset((dict, list)).__contains__


def walk(value: Any) -> tuple[bool, bool]:
    """(nesting within ``MAX_DEPTH``, a float of magnitude ``_WIDE`` or more within those levels). Level by level,
    iterative (a recursive walk would fail the way the request would). A parsed body holds plain dicts and lists
    only, so each level's containers and floats are picked by type at C speed (``compress``): a harness's 230 kB
    body has ~10k values, and a Python test of each cost a quarter more."""
    if type(value) is float:
        return True, abs(value) >= _WIDE
    level, wide = [value] if _CONTAINER(type(value)) else [], False
    for _ in range(MAX_DEPTH):
        if not level:
            return True, wide
        values = list(chain.from_iterable([node.values() if type(node) is dict else node for node in level]))
        types = list(map(type, values))
        floats = list(compress(values, map(is_, types, repeat(float))))
        wide = wide or (bool(floats) and max(map(abs, floats)) >= _WIDE)
        level = list(compress(values, map(_CONTAINER, types)))
    return not level, wide


def _may_nest_deeply(raw: bytes) -> bool:
    """Whether a body's nesting needs walking: a large one always (counting its brackets costs about what the
    walk does, ~170 us at 230 kB), a small one past ``MAX_DEPTH`` brackets."""
    return len(raw) > WALKED_BYTES or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH


def check_json_value(
    parsed: Any, raw: bytes, utf8: bool = True, paired: bool = False, shallow: bool | None = None
) -> None:
    """400 for a body that parsed but is no usable JSON text (see the module docstring); ``utf8``: ``raw`` is
    strict UTF-8; ``paired``: orjson parsed it, so it holds no lone surrogate (``parse_json``); ``shallow``: its
    nesting is within ``MAX_DEPTH``, where the parse walked it already (``parse_json``).

    Only a body that may hold one is serialized again to look: a client that escapes every character outside
    ASCII (Python's ``json.dumps`` does) writes an emoji as a surrogate pair, and Claude Code's tool definitions
    carry one (a robot face), so such a body always matched ``_SURROGATE_ESCAPE``, and serializing it again took a
    quarter of the proxy's time a call at 128k tokens of context (``bench/proxy_context.py``)."""
    if shallow is None:
        shallow = not isinstance(parsed, (dict, list)) or not _may_nest_deeply(raw) or walk(parsed)[0]
    if not shallow:
        raise InvalidRequest(f"the JSON body is nested deeper than {MAX_DEPTH} levels")
    if not utf8 or (not paired and _SURROGATE_ESCAPE.search(raw)):
        try:
            json.dumps(parsed, ensure_ascii=False).encode()
        except UnicodeEncodeError as exc:
            lone = exc.object[exc.start : exc.end].encode("unicode_escape", "backslashreplace").decode()
            raise InvalidRequest(f"the JSON body has a lone UTF-16 surrogate ({lone}), which is not text") from None


async def read_json_body(request: Request, limit: int) -> Any:
    """The parsed JSON body; PayloadTooLarge (413) over ``limit`` bytes, InvalidRequest (400) if malformed."""
    return (await read_json_sent(request, limit))[0]


async def read_json_sent(request: Request, limit: int, parse: BodyParser = parse_json) -> tuple[Any, bytes | None]:
    """The parsed JSON body and its bytes as sent (None if not UTF-8), for callers that store the body: keeping
    them saves serializing a large request again. ``parse``: ``parse_json``, or a memo in front of it. Kept as bytes: a text holding one character past U+FFFF (an
    emoji in a tool's description) takes 4 bytes a character, and decoding, comparing and slicing such a text
    cost ~0.5 ms a call at 128k tokens of context (``bench/proxy_context.py``)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes is over the {limit}-byte limit")
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise PayloadTooLarge(f"request body is over the {limit}-byte limit")
    sent = bytes(body)
    try:
        parsed, paired, shallow = parse(sent)
    except ValueError as exc:
        raise InvalidRequest(f"malformed JSON body: {exc}") from None
    except RecursionError:
        raise InvalidRequest(f"the JSON body is nested deeper than {MAX_DEPTH} levels") from None
    utf8 = paired or _is_utf8(sent)  # orjson reads strict UTF-8 only; JSON in UTF-16/32 is stored re-serialized
    check_json_value(parsed, sent, utf8=utf8, paired=paired, shallow=shallow)
    return parsed, sent if utf8 else None


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


__all__ = ["MAX_DEPTH", "BodyParser", "Parsed", "check_json_value", "parse_json", "read_json_body", "read_json_sent", "walk"]
