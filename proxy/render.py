"""The served model's tokenizer + chat template: messages -> prompt text -> ids, ids -> text.

Loading and rendering are CPU work, so the async wrappers run them off the event loop.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import anyio.to_thread
from jinja2 import TemplateError

from rollwire.errors import InvalidRequest
from rollwire.proxy.chat_template import ChatTemplate
from rollwire.store.codec import ID_BYTES, decode_ids, encode_ids

END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|end|>")
"""End-of-turn tokens of common chat templates; the tokenizer's eos is always one too."""

RENDERED_CACHE_TOKENS = 1_000_000
"""Most token ids ``encode_rendered`` keeps (4 bytes each), least recently used dropped first."""


class Renderer:
    """Sync template operations (the splice planner calls them); ``a*`` variants for the event loop."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidRequest("the model folder has no chat template; the proxy needs one to render prompts")
        self.tokenizer = tokenizer
        self.template = ChatTemplate(tokenizer)
        vocab = tokenizer.get_vocab()
        ends = {tokenizer.eos_token_id} | {vocab[t] for t in END_OF_TURN if t in vocab}
        self.end_ids: frozenset[int] = frozenset(i for i in ends if i is not None)
        names = [t for t in END_OF_TURN if t in vocab] or [tokenizer.eos_token]
        self.end_text: str = names[0]
        self._backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
        self._encode_ids = self._backend_encoder()
        cleans = getattr(tokenizer, "clean_up_tokenization_spaces", True)
        self._decoder = self._backend if not cleans else None
        """Decodes exactly as the wrapper does when it has no clean-up to apply afterwards."""
        self._rendered: OrderedDict[Hashable, bytes] = OrderedDict()
        self._rendered_tokens = 0
        self._rendered_lock = threading.Lock()  # big plans are made on worker threads

    @classmethod
    def from_folder(cls, folder: str | Path) -> Renderer:
        from rollwire.tokenizers import load_tokenizer

        return cls(load_tokenizer(folder))

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], add_generation_prompt: bool, **kwargs: Any
    ) -> str:
        """``messages`` as ``Message.to_template`` builds them (plain JSON values: the template's ``plain`` render);
        ``kwargs``: template variables such as ``enable_thinking`` (a template that has no use for one ignores it)."""
        try:
            return self.template.render(messages, tools, add_generation_prompt, plain=True, **kwargs)
        except (TemplateError, TypeError, ValueError, KeyError) as exc:  # raise_exception, bad message shapes
            raise InvalidRequest(f"the chat template cannot render these messages: {exc}".splitlines()[0]) from None

    def encode_rendered(self, key: Hashable, render: Callable[[], str]) -> tuple[list[int], bytes]:
        """The ids of a whole rendered prompt and their stored encoding (``rollwire.store.codec``), remembered by a
        ``key`` that decides its text (exact: the same key, the same text, the same ids); ``render`` makes the text
        on a miss. A remembered prompt is kept as its stored bytes, so a call that starts from it stores them as
        they are rather than encoding the ids again (~10 ns an id: 0.1-0.2 ms at a harness's 10-20k-token prompt).

        Every rollout of a group starts from the same prompt (GRPO samples each task several times) and a
        retried rollout repeats its own; rendering a harness's system prompt and tools costs ~0.1 ms and encoding
        them ~0.6 us a token (they run to thousands), a lookup one hash of the key. Tails are never remembered:
        each is new text.
        """
        with self._rendered_lock:
            hit = self._rendered.get(key)
            if hit is not None:
                self._rendered.move_to_end(key)
                return decode_ids(hit), hit
        ids = self.encode(render())
        blob = encode_ids(ids)
        with self._rendered_lock:
            if key not in self._rendered:
                self._rendered[key] = blob
                self._rendered_tokens += len(ids)
            while self._rendered_tokens > RENDERED_CACHE_TOKENS and self._rendered:
                self._rendered_tokens -= len(self._rendered.popitem(last=False)[1]) // ID_BYTES
        return ids, blob

    def remembers(self, key: Hashable) -> bool:
        """Whether ``encode_rendered`` holds the ids for ``key`` (a lookup, no render or encode)."""
        with self._rendered_lock:
            return key in self._rendered

    def encode(self, text: str) -> list[int]:
        if self._encode_ids is not None:
            return self._encode_ids(text)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _backend_encoder(self) -> Callable[[str], list[int]] | None:
        """The Rust tokenizer itself: the same ids without the wrapper's ~45 us. Its batch encoder without offsets
        (``encode_batch_fast``, tokenizers >= 0.21) skips mapping every token to its characters, which a prompt's
        ids never use: ~20% of an encode (a tail of 170 characters: 45 us to 35 hot, ~13 us a call in the proxy)."""
        backend = self._backend
        if backend is None:
            return None
        fast = getattr(backend, "encode_batch_fast", None)
        if fast is None:
            return lambda text: list(backend.encode(text, add_special_tokens=False).ids)
        return lambda text: list(fast([text], add_special_tokens=False)[0].ids)

    def decode(self, ids: list[int]) -> str:
        if self._decoder is not None:  # the Rust tokenizer itself: the same text without the wrapper's ~20 us
            return str(self._decoder.decode(ids, skip_special_tokens=False))
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def token_strings(self, ids: list[int]) -> list[str]:
        return [str(t) for t in self.tokenizer.convert_ids_to_tokens(ids)]

    async def adecode(self, ids: list[int]) -> str:
        return await anyio.to_thread.run_sync(self.decode, ids)


__all__ = ["END_OF_TURN", "Renderer"]
