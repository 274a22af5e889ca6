"""Constrained decoding: vLLM's ``structured_outputs`` (``{"json": schema}``, ``{"json_object": true}``) enforced
by llguidance, so a harness that asks for JSON (Claude Code's title calls, a schema'd answer) gets JSON from the
bundled engine as it does from vLLM, which uses the same library.

One ``Grammars`` per served model turns a spec into a compiled grammar at request time (a bad schema is the
request's 400) and gives each sequence a ``Constraint``: before every sampling step its mask leaves only the
tokens that keep the output a valid prefix (the end tokens once the document is whole); after it, the sampled
token advances it. The mask applies to the logits the token is drawn from, so the recorded logprobs are those of
the distribution actually sampled. (``bench/grammar.py`` compares the libraries that could do this.)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from rollwire.errors import InvalidRequest

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # declared in the stub only (a TypedDict)

SPEC_KINDS = ("json", "json_object")
COMPACT: JsonCompileOptions = {"whitespace_flexible": False}
"""JSON is written compact (no whitespace between its tokens; a schema's ``x-guidance`` may say otherwise), as
rollwire serves vLLM (``disable_any_whitespace``): a model free to add blanks may spend its whole budget on them."""


class Constraint:
    """One sequence's matcher: ``mask`` a logits row in place, then ``advance`` with the sampled token."""

    def __init__(self, matcher: Any, vocab_size: int, eos_token_ids: Sequence[int]) -> None:
        from llguidance.torch import allocate_token_bitmask, fill_next_token_bitmask

        self._matcher = matcher
        self._fill = fill_next_token_bitmask
        self._bitmask = allocate_token_bitmask(1, vocab_size)
        self._eos = list(eos_token_ids)

    def mask(self, logits: torch.Tensor) -> None:
        """Set to -inf every logit (one row) whose token would break the grammar. A matcher that failed (a grammar
        past the library's limits mid-answer) leaves only the end tokens: that sequence ends, its batch goes on."""
        try:
            if not self._matcher.is_error():
                self._fill(self._matcher, self._bitmask, 0)
        except Exception:  # noqa: BLE001 - whatever the library raises, only this sequence may pay for it
            pass
        if self._matcher.is_error():
            ends = logits.new_full(logits.shape, float("-inf"))
            ends[self._eos] = logits[self._eos]
            logits.copy_(ends)
            return
        words = self._bitmask[0]
        bits = (words.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1  # bit i of word w: token 32w + i
        allowed = bits.flatten()[: logits.shape[-1]].bool()
        if allowed.shape[0] < logits.shape[-1]:  # ids past the tokenizer's (padding rows of the output head)
            allowed = torch.cat([allowed, allowed.new_zeros(logits.shape[-1] - allowed.shape[0])])
        logits.masked_fill_(~allowed, float("-inf"))

    def advance(self, token_id: int) -> None:
        if not self._matcher.is_stopped():
            self._matcher.consume_token(token_id)


class Grammars:
    """Compiles ``structured_outputs`` specs for one tokenizer; llguidance's tokenizer is built on first use."""

    def __init__(self, tokenizer: Any, eos_token_ids: Sequence[int], vocab_size: int) -> None:
        self._hf = tokenizer
        self._eos = list(eos_token_ids)
        self._vocab = vocab_size
        self._lock = threading.Lock()
        self._ll: Any = None

    def _tokenizer(self) -> Any:
        with self._lock:
            if self._ll is None:
                import llguidance.hf

                self._ll = llguidance.hf.from_tokenizer(self._hf, n_vocab=self._vocab, eos_token=self._eos)
            return self._ll

    def compile(self, spec: dict[str, Any] | None) -> str | None:
        """The grammar for ``spec`` (None: unconstrained); ``InvalidRequest`` names what is wrong with it."""
        if spec is None:
            return None
        import llguidance

        kinds = [kind for kind in SPEC_KINDS if spec.get(kind) not in (None, False)]
        unknown = sorted(k for k, v in spec.items() if k not in SPEC_KINDS and v not in (None, False, ""))
        if unknown or len(kinds) != 1:
            raise InvalidRequest(
                f"structured_outputs takes exactly one of {', '.join(SPEC_KINDS)} here"
                + (f" (not {', '.join(unknown)})" if unknown else ""),
                param="structured_outputs",
            )
        schema = spec["json"] if kinds[0] == "json" else {"type": "object"}
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                message = f"structured_outputs.json is not JSON: {exc}"
                raise InvalidRequest(message, param="structured_outputs") from None
        if not isinstance(schema, dict):
            raise InvalidRequest("structured_outputs.json must be a JSON schema object", param="structured_outputs")
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=COMPACT)
        error = llguidance.LLMatcher.validate_grammar(grammar, self._tokenizer())
        if error:
            raise InvalidRequest(f"structured_outputs: {error}", param="structured_outputs")
        return str(grammar)

    def constraint(self, grammar: str) -> Constraint:
        import llguidance

        matcher = llguidance.LLMatcher(self._tokenizer(), grammar)
        if matcher.is_error():
            raise InvalidRequest(f"structured_outputs: {matcher.get_error()}", param="structured_outputs")
        return Constraint(matcher, self._vocab, self._eos)


__all__ = ["Constraint", "Grammars", "SPEC_KINDS"]
