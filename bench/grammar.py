"""JSON-schema constrained decoding for the bundled CPU engine: llguidance vs xgrammar vs outlines_core, in one run.

    python bench/grammar.py [--rounds 2] [--walks 5] [--libraries llguidance,xgrammar,outlines_core]

For each library and each tokenizer (the tiny default model's byte-level BPE, built under a temporary
ROLLWIRE_HOME; the real Qwen2 BPE from $ROLLWIRE_SHARED_DIR/tokenizers/qwen2-bpe, left out with a note when
absent) it times, --rounds times (the table gives the median):

1. setup: the library's tokenizer object, built once per tokenizer (llguidance.hf.from_tokenizer; xgrammar's
   TokenizerInfo.from_huggingface plus a GrammarCompiler without cache; outlines_core's Vocabulary from the
   token bytes),
2. compile: from a schema to a matcher ready for its first mask, for Claude Code's title-call schema
   ({"title": string}, required, no other properties) and for ``{"type": "object"}`` (json_object),
3. one decoding step: fill the allowed-token bitmask for one sequence, then advance the matcher with one
   allowed token (the pick between the two is not timed). Each compiled matcher walks --walks times (reset in
   between: the first walk pays any lazily built state, the later ones find it warm) through a fixed target
   document: at each step the allowed token whose bytes are the longest prefix of what is left of the target
   (ties: the smallest id), and once nothing is left the end token, which the mask must allow. The walk must
   end with the matcher stopped and the decoded text equal to the target, which is valid for its schema.

Every library gets the mask sized for the model's output head (the tiny model's config; 151936 rows, Qwen2.5's
and Qwen3's, for the Qwen tokenizer, 267 more than its tokens): the first walk checks that no padding row and no
special token other than the end token is ever allowed, and that a logits row of that size masked with the
bitmask keeps exactly the allowed ids. Prints the produced documents, then one table: setup and compile
milliseconds, step microseconds for both grammars (mean and p99 over every walk; "1st", the median first step
after a compile, where a library that builds its automaton lazily pays for it) and each step mean's ratio to
the fastest library's on the same tokenizer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

LIBRARIES = ("llguidance", "xgrammar", "outlines_core")
TITLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"title": {"type": "string"}},
    "required": ["title"],
    "additionalProperties": False,
}
GRAMMARS: dict[str, dict[str, Any]] = {"schema": TITLE_SCHEMA, "json_object": {"type": "object"}}
TARGETS = {
    "schema": '{"title": "Fix flaky retry test in the proxy"}',
    "json_object": '{"name": "rollwire", "ok": true, "n": -2.5e+3, "tags": {"a": "b", "c": null}}',
}
QWEN_HEAD_ROWS = 151936
"""vocab_size in Qwen2.5's and Qwen3's model configs: the output head is padded past the tokenizer's 151669."""
MAX_STEPS = 200


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the character a BPE token string shows for each byte."""
    shown = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = shown[:]
    extra = 0
    for byte in range(256):
        if byte not in shown:
            shown.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(shown, chars, strict=True)}


@dataclass
class Tokenizer:
    name: str
    hf: Any
    head_rows: int
    """Rows of the model's output head, the size every mask is allocated for (>= the tokenizer's length)."""
    eos: int
    token_bytes: list[bytes | None] = field(default_factory=list)
    """Each id's bytes; None for added/special tokens, which never stand for text."""
    by_bytes: dict[bytes, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        decoder = self.hf.backend_tokenizer.decoder
        if "ByteLevel" not in type(decoder).__name__ and "ByteLevel" not in repr(decoder):
            raise SystemExit(f"{self.name}: only byte-level BPE tokenizers are handled here (decoder {decoder!r})")
        special = set(self.hf.added_tokens_decoder)
        table = _byte_decoder()
        for token_id, piece in enumerate(self.hf.convert_ids_to_tokens(list(range(len(self.hf))))):
            raw = None if token_id in special or piece is None else bytes(table[c] for c in piece)
            self.token_bytes.append(raw)
            if raw:
                self.by_bytes.setdefault(raw, []).append(token_id)


class Candidate(Protocol):
    """One library's side: ``setup`` once per tokenizer, ``compile`` a schema into a fresh matcher, then steps."""

    name: str

    def setup(self, tok: Tokenizer) -> None: ...

    def compile(self, schema: dict[str, Any]) -> Any: ...

    def allocate(self) -> torch.Tensor: ...

    def fill(self, matcher: Any, mask: torch.Tensor) -> None: ...

    def advance(self, matcher: Any, token_id: int) -> bool: ...

    def stopped(self, matcher: Any) -> bool:
        """True once the end token has been consumed in an accepting state."""
        ...

    def reset(self, matcher: Any) -> None:
        matcher.reset()


class LLGuidance(Candidate):
    name = "llguidance"

    def __init__(self) -> None:  # imports stay out of the timed setup (llguidance.torch loads torch.compile)
        import llguidance.hf
        from llguidance.torch import allocate_token_bitmask, fill_next_token_bitmask

        self._hf = llguidance.hf
        self._alloc, self._fill = allocate_token_bitmask, fill_next_token_bitmask

    def setup(self, tok: Tokenizer) -> None:
        self._tok = self._hf.from_tokenizer(tok.hf, n_vocab=tok.head_rows, eos_token=tok.eos)

    def compile(self, schema: dict[str, Any]) -> Any:
        import llguidance

        matcher = llguidance.LLMatcher(self._tok, llguidance.LLMatcher.grammar_from_json_schema(schema), log_level=0)
        if matcher.is_error():
            raise RuntimeError(matcher.get_error())
        return matcher

    def allocate(self) -> torch.Tensor:
        return self._alloc(1, self._tok.vocab_size)

    def fill(self, matcher: Any, mask: torch.Tensor) -> None:
        self._fill(matcher, mask, 0)

    def advance(self, matcher: Any, token_id: int) -> bool:
        return bool(matcher.consume_token(token_id))

    def stopped(self, matcher: Any) -> bool:
        return bool(matcher.is_stopped() and not matcher.is_error())


class XGrammar(Candidate):
    name = "xgrammar"

    def __init__(self) -> None:
        import xgrammar

        self._xgr = xgrammar

    def setup(self, tok: Tokenizer) -> None:
        xgrammar = self._xgr
        # TokenizerInfo.from_huggingface takes added tokens (<|im_start|>, <tool_call>, ...) for text: a JSON
        # string could then hold them. Built from the token strings with those left empty, it marks them special.
        special = set(tok.hf.added_tokens_decoder) - {tok.eos}
        pieces = tok.hf.convert_ids_to_tokens(list(range(len(tok.hf))))
        encoded = ["" if token_id in special else piece for token_id, piece in enumerate(pieces)]
        self._info = xgrammar.TokenizerInfo(encoded, xgrammar.VocabType.BYTE_LEVEL, vocab_size=tok.head_rows,
                                            stop_token_ids=[tok.eos])  # fmt: skip
        self._compiler = xgrammar.GrammarCompiler(self._info, cache_enabled=False)  # each round compiles anew

    def compile(self, schema: dict[str, Any]) -> Any:
        return self._xgr.GrammarMatcher(self._compiler.compile_json_schema(json.dumps(schema)))

    def allocate(self) -> torch.Tensor:
        return self._xgr.allocate_token_bitmask(1, self._info.vocab_size)

    def fill(self, matcher: Any, mask: torch.Tensor) -> None:
        matcher.fill_next_token_bitmask(mask, 0)

    def advance(self, matcher: Any, token_id: int) -> bool:
        return bool(matcher.accept_token(token_id))

    def stopped(self, matcher: Any) -> bool:
        return bool(matcher.is_terminated())


class OutlinesCore(Candidate):
    name = "outlines_core"

    def __init__(self) -> None:
        from outlines_core.kernels.torch import allocate_token_bitmask, fill_next_token_bitmask

        self._alloc, self._fill = allocate_token_bitmask, fill_next_token_bitmask

    def setup(self, tok: Tokenizer) -> None:
        from outlines_core import Vocabulary

        self._rows, self._eos = tok.head_rows, tok.eos
        # Vocabulary.from_pretrained reads the hub; a local tokenizer goes in as {token bytes: [ids]}, end token
        # left out (the constructor takes its id apart) and so are the other special tokens: as text they would
        # match inside JSON strings.
        table = _byte_decoder()
        special = set(tok.hf.added_tokens_decoder)
        tokens: dict[bytes, list[int]] = {}
        for token_id, piece in enumerate(tok.hf.convert_ids_to_tokens(list(range(len(tok.hf))))):
            if token_id not in special:
                tokens.setdefault(bytes(table[c] for c in piece), []).append(token_id)
        self._vocab = Vocabulary(tok.eos, tokens)

    def compile(self, schema: dict[str, Any]) -> Any:
        from outlines_core import Guide, Index
        from outlines_core.json_schema import build_regex_from_schema

        return Guide(Index(build_regex_from_schema(json.dumps(schema)), self._vocab))

    def allocate(self) -> torch.Tensor:
        return self._alloc(self._rows)

    def fill(self, matcher: Any, mask: torch.Tensor) -> None:
        self._fill(matcher, mask)

    def advance(self, matcher: Any, token_id: int) -> bool:
        if token_id == self._eos:  # a finished Guide allows the end token but advancing with it raises
            return bool(matcher.is_finished())
        try:
            matcher.advance(token_id, return_tokens=False)
        except ValueError:
            return False
        return True

    def stopped(self, matcher: Any) -> bool:
        return bool(matcher.is_finished())


CANDIDATES: dict[str, type[Candidate]] = {"llguidance": LLGuidance, "xgrammar": XGrammar, "outlines_core": OutlinesCore}


def allowed_ids(mask: torch.Tensor) -> np.ndarray:
    """The ids whose bit is set: bit i of int32 word w is token 32 * w + i (little-endian bytes)."""
    return np.flatnonzero(np.unpackbits(mask[0].numpy().view(np.uint8), bitorder="little"))


def apply_mask(logits: torch.Tensor, mask: torch.Tensor) -> None:
    """-inf into every logit (one row, any width) whose bit is clear or lies past the mask."""
    bits = (mask[0].unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1
    allowed = bits.flatten()[: logits.shape[-1]].bool()
    if allowed.shape[0] < logits.shape[-1]:
        allowed = torch.cat([allowed, allowed.new_zeros(logits.shape[-1] - allowed.shape[0])])
    logits.masked_fill_(~allowed, float("-inf"))


def _pick(tok: Tokenizer, mask: torch.Tensor, left: bytes) -> int | None:
    """The allowed token with the longest bytes that start ``left`` (smallest id on a tie)."""
    words = mask[0]
    for size in range(min(len(left), 128), 0, -1):
        for token_id in tok.by_bytes.get(left[:size], ()):
            if token_id < tok.head_rows and (int(words[token_id >> 5]) >> (token_id & 31)) & 1:
                return token_id
    return None


@dataclass
class Walk:
    steps_s: list[float]
    ids: list[int]
    special_allowed: int = 0
    """Steps at which a special token other than the end token was allowed."""
    stray_bits: bool = False
    """Whether the mask's last word had bits set past the head's rows (harmless once cut to the logits row)."""

    def notes(self) -> str:
        note = f", non-end special ids allowed at {self.special_allowed} steps" if self.special_allowed else ""
        return note + (", bits set past the last row" if self.stray_bits else "")


def walk(lib: Candidate, tok: Tokenizer, matcher: Any, mask: torch.Tensor, target: str, check: bool) -> Walk:
    """Drive ``matcher`` through ``target`` then the end token; each step's fill + advance time."""
    left = target.encode()
    result = Walk([], [])
    clock = time.perf_counter
    for _ in range(MAX_STEPS):
        start = clock()
        lib.fill(matcher, mask)
        filled = clock()
        if check:
            ids = allowed_ids(mask)
            result.stray_bits |= bool(ids.size and ids[-1] >= tok.head_rows)
            ids = ids[ids < tok.head_rows]
            if ids.size and ids[-1] >= len(tok.token_bytes):
                raise SystemExit(f"{lib.name}/{tok.name}: padding id {ids[-1]} allowed")
            result.special_allowed += any(tok.token_bytes[i] is None and i != tok.eos for i in ids)
            logits = torch.zeros(1, tok.head_rows)
            apply_mask(logits, mask)
            if not np.array_equal(torch.isfinite(logits[0]).nonzero().flatten().numpy(), ids):
                raise SystemExit(f"{lib.name}/{tok.name}: the masked logits row disagrees with the bitmask")
        if left:
            token_id = _pick(tok, mask, left)
            if token_id is None:
                raise SystemExit(f"{lib.name}/{tok.name}: no allowed token continues {left[:40]!r}")
        else:
            token_id = tok.eos
            if not (int(mask[0][token_id >> 5]) >> (token_id & 31)) & 1:
                raise SystemExit(f"{lib.name}/{tok.name}: the document is whole but the end token is not allowed")
        picked = clock()
        ok = lib.advance(matcher, token_id)
        done = clock()
        if not ok:
            raise SystemExit(f"{lib.name}/{tok.name}: token {token_id} was allowed but not accepted")
        result.steps_s.append((filled - start) + (done - picked))
        if token_id == tok.eos:
            if not lib.stopped(matcher):
                raise SystemExit(f"{lib.name}/{tok.name}: the end token did not stop the matcher")
            return result
        result.ids.append(token_id)
        left = left[len(tok.token_bytes[token_id] or b"") :]
    raise SystemExit(f"{lib.name}/{tok.name}: no end within {MAX_STEPS} steps")


def _validate(kind: str, text: str, target: str) -> None:
    if text != target:
        raise SystemExit(f"decoded {text!r}, expected {target!r}")
    doc = json.loads(text)
    if not isinstance(doc, dict) or (kind == "schema" and (set(doc) != {"title"} or not isinstance(doc["title"], str))):
        raise SystemExit(f"{text!r} does not satisfy the {kind} grammar")


@dataclass
class Row:
    library: str
    tokenizer: str
    setup_s: list[float] = field(default_factory=list)
    compile_s: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in GRAMMARS})
    steps_s: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in GRAMMARS})
    first_s: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in GRAMMARS})
    """Each round's first step after compiling: what a library that builds its automaton lazily pays there."""

    def step_mean_us(self, kind: str) -> float:
        return statistics.fmean(self.steps_s[kind]) * 1e6

    def step_p99_us(self, kind: str) -> float:
        return float(np.percentile(self.steps_s[kind], 99)) * 1e6


def measure(name: str, tok: Tokenizer, rounds: int, walks: int) -> Row:
    row = Row(name, tok.name)
    for round_no in range(rounds):
        lib = CANDIDATES[name]()
        start = time.perf_counter()
        lib.setup(tok)
        row.setup_s.append(time.perf_counter() - start)
        mask = lib.allocate()
        for kind, schema in GRAMMARS.items():
            start = time.perf_counter()
            matcher = lib.compile(schema)
            row.compile_s[kind].append(time.perf_counter() - start)
            for walk_no in range(walks):
                if walk_no:
                    lib.reset(matcher)
                first = round_no == 0 and walk_no == 0
                result = walk(lib, tok, matcher, mask, TARGETS[kind], check=first)
                row.steps_s[kind] += result.steps_s
                if not walk_no:
                    row.first_s[kind].append(result.steps_s[0])
                if first:
                    text = tok.hf.decode(result.ids)
                    _validate(kind, text, TARGETS[kind])
                    steps = len(result.steps_s)
                    print(f"{name:<13} {tok.name:<5} {kind:<11} {steps:>3} steps{result.notes()}: {text}", flush=True)
    return row


def _tokenizers(shared: Path) -> list[Tokenizer]:
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from rollwire.settings import Settings
    from rollwire.tiny_model import ensure_tiny_model

    hf_logging.disable_progress_bar()  # building the tiny model prints one
    folder = ensure_tiny_model(Settings().home)
    tiny = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    rows = int(json.loads((folder / "config.json").read_text())["vocab_size"])
    found = [Tokenizer("tiny", tiny, rows, tiny.eos_token_id)]
    qwen_dir = shared / "tokenizers" / "qwen2-bpe"
    if (qwen_dir / "vocab.json").is_file():
        qwen = AutoTokenizer.from_pretrained(str(qwen_dir), local_files_only=True)
        found.append(Tokenizer("qwen", qwen, QWEN_HEAD_ROWS, qwen.eos_token_id))
    else:
        print(f"note: no Qwen tokenizer at {qwen_dir} (set ROLLWIRE_SHARED_DIR): its rows are left out",
              file=sys.stderr)  # fmt: skip
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="setups and compiles per library and tokenizer (2)")
    parser.add_argument("--walks", type=int, default=5, help="walks through each compiled grammar per round (5)")
    parser.add_argument("--libraries", default=",".join(LIBRARIES), help=f"subset of {', '.join(LIBRARIES)}")
    default_shared = os.environ.get("ROLLWIRE_SHARED_DIR") or str(Path(__file__).resolve().parents[2] / "shared")
    parser.add_argument("--shared-dir", default=default_shared, help="shared files ($ROLLWIRE_SHARED_DIR, ../shared)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.libraries.split(",") if n.strip()]
    if unknown := [n for n in names if n not in CANDIDATES]:
        parser.error(f"unknown libraries: {', '.join(unknown)}")
    if args.rounds < 1 or args.walks < 1:
        parser.error("--rounds and --walks must be at least 1")
    missing = []
    for name in names:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    names = [name for name in names if name not in missing]
    if missing:  # llguidance, the engine's, is always there; the others come with the grammar-bench extra
        print(f"left out, not installed: {', '.join(missing)} (pip install 'rollwire[grammar-bench]')")
    with tempfile.TemporaryDirectory(prefix="rollwire-bench-grammar-") as home:
        os.environ["ROLLWIRE_HOME"] = home  # the tiny model is built here, not in the real home
        tokenizers = _tokenizers(Path(args.shared_dir))
        rows: list[Row] = []
        print("documents walked (target-greedy tokens, then the end token):")
        for tok in tokenizers:
            for name in names:
                print(f"measuring {name} on the {tok.name} tokenizer ...", file=sys.stderr, flush=True)
                rows.append(measure(name, tok, args.rounds, args.walks))
    header = (f"{'library':<13} {'tokenizer':<9} {'setup ms':>8} {'compile ms':>10} {'(object)':>8} "
              f"{'step us':>7} {'p99':>6} {'1st':>6} {'x best':>6}   "
              f"{'object step us':>14} {'p99':>6} {'1st':>6} {'x best':>6}")  # fmt: skip
    print()
    print(header)
    print("-" * len(header))
    for row in rows:
        peers = [r for r in rows if r.tokenizer == row.tokenizer]
        best = {k: min(r.step_mean_us(k) for r in peers) for k in GRAMMARS}
        print(f"{row.library:<13} {row.tokenizer:<9} {statistics.median(row.setup_s) * 1e3:>8.1f} "
              f"{statistics.median(row.compile_s['schema']) * 1e3:>10.1f} "
              f"{statistics.median(row.compile_s['json_object']) * 1e3:>8.1f} "
              f"{row.step_mean_us('schema'):>7.1f} {row.step_p99_us('schema'):>6.0f} "
              f"{statistics.median(row.first_s['schema']) * 1e6:>6.0f} "
              f"{row.step_mean_us('schema') / best['schema']:>5.1f}x   "
              f"{row.step_mean_us('json_object'):>14.1f} {row.step_p99_us('json_object'):>6.0f} "
              f"{statistics.median(row.first_s['json_object']) * 1e6:>6.0f} "
              f"{row.step_mean_us('json_object') / best['json_object']:>5.1f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
