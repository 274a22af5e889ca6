"""Automatic prefix caching: the KV of earlier sequences, kept in token blocks so a later prompt prefills only its tail.

An agent's calls grow one conversation: each prompt is the previous prompt, the previous answer and a little more.
Every block of ``block_tokens`` ids a sequence computed is kept under its place in a trie keyed by the exact ids
from position 0 (never by a hash, so a crafted prompt cannot collide into another rollout's keys and values), and
a new prompt takes the longest run of whole cached blocks it starts with. Blocks are dropped least recently used
first once the byte budget is spent; a path is touched leaf first, so a block is always more recent than the
blocks after it and eviction only ever removes leaves. The batcher empties the cache on every weight swap: keys
and values computed by one policy must never serve the next.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field

import torch

from rollwire.engine.kv import room_for

MIN_CACHED_SHARE = 0.2
"""A cached prefix serves a prompt only when it covers this share of it. Below it, continuing in passes (each
reading the whole cache again) costs what a whole prefill does: a 16k prompt on the tiny model, one CPU thread,
took 1.00x a whole prefill's time with 10% of it cached, 0.98x with 20%, 0.74x with 50% and 0.19x with 90%
(``bench/continued_prefill.py``)."""

Layers = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer (keys, values), each (1 x heads x tokens x dim): one sequence's cache as transformers holds it."""


@dataclass(eq=False, slots=True)
class _Block:
    """``block_tokens`` positions of every layer's keys and values, stacked (layers x 2 x heads x tokens x dim)."""

    key: Hashable
    """Its entry in the parent's children (its ids) or, for a first block, in the roots (salt, ids)."""
    kv: torch.Tensor
    parent: _Block | None
    children: dict[Hashable, _Block] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()


@dataclass(frozen=True, slots=True)
class CachedPrefix:
    """The first ``tokens`` positions of a prompt, ready to continue from."""

    tokens: int
    buffers: Layers
    """Per layer (keys, values) whose first ``tokens`` columns are the prefix's; the rest is room for the prompt's
    tail and its decoding, so continuing copies nothing (``kv.GrowingLayer.over``)."""

    @property
    def layers(self) -> Layers:
        """The prefix's keys and values alone (views)."""
        return [(keys[:, :, : self.tokens], values[:, :, : self.tokens]) for keys, values in self.buffers]


@dataclass(slots=True)
class PrefixCacheStats:
    """Counters since start (tokens, as vLLM's ``prefix_cache_queries``/``prefix_cache_hits``) and what is held."""

    queried_tokens: int = 0
    hit_tokens: int = 0
    queries: int = 0
    hits: int = 0
    evicted_blocks: int = 0
    cleared: int = 0
    blocks: int = 0
    bytes: int = 0


class PrefixCache:
    """Blocks of earlier sequences' keys and values, at most ``budget_bytes``; used by the batcher thread only."""

    def __init__(self, budget_bytes: int, block_tokens: int = 32, min_share: float = MIN_CACHED_SHARE) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be at least 1")
        self.budget_bytes = max(0, budget_bytes)
        self.block_tokens = block_tokens
        self.min_share = min_share
        self.stats = PrefixCacheStats()
        self._roots: dict[Hashable, _Block] = {}
        self._recency: OrderedDict[_Block, None] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    def lookup(self, ids: list[int], salt: str | None = None) -> CachedPrefix | None:
        """The longest run of whole blocks cached under ``salt`` that ``ids`` starts with, leaving at least one id
        to prefill; None where it covers less than ``min_share`` of ``ids`` (a whole prefill is faster)."""
        if not self.enabled:
            return None
        self.stats.queries += 1
        self.stats.queried_tokens += len(ids)
        path = self._walk(ids, salt, (len(ids) - 1) // self.block_tokens)
        if not path or len(path) * self.block_tokens < self.min_share * len(ids):
            return None
        self._touch(path)
        self.stats.hits += 1
        tokens = len(path) * self.block_tokens
        self.stats.hit_tokens += tokens
        layers, _, heads, width, dim = path[0].kv.shape
        room = path[0].kv.new_empty(layers, 2, 1, heads, room_for(len(ids)), dim)
        for n, block in enumerate(path):  # one copy, straight into buffers the continuation grows in place
            room[:, :, 0, :, n * width : (n + 1) * width] = block.kv
        return CachedPrefix(tokens, [(layer[0], layer[1]) for layer in room])

    def insert(self, ids: list[int], layers: Layers, salt: str | None = None) -> None:
        """Keep, under ``salt``, the whole blocks of ``ids``, whose keys and values are ``layers``' last
        ``len(ids)`` columns."""
        if not self.enabled:
            return
        width = layers[0][0].shape[-2]
        if width < len(ids):
            raise ValueError(f"the cache holds {width} positions, fewer than the {len(ids)} ids given")
        whole = len(ids) // self.block_tokens
        path = self._walk(ids, salt, whole)
        if len(path) == whole:
            if path:
                self._touch(path)
            return
        start = len(path) * self.block_tokens
        lo, hi = width - len(ids) + start, width - len(ids) + whole * self.block_tokens
        stacked = torch.stack([torch.stack((k[0, :, lo:hi], v[0, :, lo:hi])) for k, v in layers])
        parent = path[-1] if path else None
        for n in range(whole - len(path)):
            lo = start + n * self.block_tokens
            block_ids = tuple(ids[lo : lo + self.block_tokens])
            kv = stacked[:, :, :, n * self.block_tokens : (n + 1) * self.block_tokens].clone()
            block = _Block(key=block_ids if parent else (salt, block_ids), kv=kv, parent=parent)
            if parent:
                parent.children[block_ids] = block
            else:
                self._roots[block.key] = block
            self.stats.blocks += 1
            self.stats.bytes += block.nbytes
            path.append(block)
            parent = block
        self._touch(path)
        self._evict()

    def clear(self) -> None:
        """Drop every block (a weight swap: the keys and values belong to the policy that computed them)."""
        self._roots.clear()
        self._recency.clear()
        self.stats.blocks = 0
        self.stats.bytes = 0
        self.stats.cleared += 1

    def _walk(self, ids: list[int], salt: str | None, most: int) -> list[_Block]:
        path: list[_Block] = []
        for n in range(most):
            block_ids = tuple(ids[n * self.block_tokens : (n + 1) * self.block_tokens])
            block = path[-1].children.get(block_ids) if path else self._roots.get((salt, block_ids))
            if block is None:
                break
            path.append(block)
        return path

    def _touch(self, path: list[_Block]) -> None:
        for block in reversed(path):
            self._recency[block] = None
            self._recency.move_to_end(block)

    def _evict(self) -> None:
        while self.stats.bytes > self.budget_bytes and self._recency:
            block, _ = self._recency.popitem(last=False)
            assert not block.children, "a block is evicted before the blocks after it"
            (block.parent.children if block.parent else self._roots).pop(block.key, None)
            self.stats.blocks -= 1
            self.stats.bytes -= block.nbytes
            self.stats.evicted_blocks += 1


__all__ = ["MIN_CACHED_SHARE", "CachedPrefix", "Layers", "PrefixCache", "PrefixCacheStats"]
