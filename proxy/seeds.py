"""Seeds for the requests that bring none (``ProxySettings.sample_seed``).

A harness at its defaults sends no seed, so at T > 0 what the model samples is luck: two runs of one test or one
task differ, and a failure cannot be replayed. With a run seed set, each unseeded request gets one derived from
the run seed, the exact prompt tokens it is sent with, and how many times that prompt came before. The same
prompt samples the same way whatever else runs beside it (batching and arrival order change nothing), and
rollouts of one group, which share their first prompt, still sample apart: the first to arrive gets the first
seed of that prompt, the next the second (which rollout gets which may change; the set of samples does not).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

from rollwire.store.codec import encode_ids

SEED_BITS = 31
"""Seeds stay below 2**31: every engine takes them (vLLM, the bundled one)."""
REMEMBERED_PROMPTS = 65_536
"""Prompts whose count is kept; the least recently seen is forgotten first (a bounded table in a long run)."""


class SampleSeeds:
    """Derives a request's seed from the run seed and its prompt; one per proxy process (state: the counts)."""

    def __init__(self, run_seed: int, remembered: int = REMEMBERED_PROMPTS) -> None:
        self._key = run_seed.to_bytes(16, "little", signed=True)
        self._seen: OrderedDict[bytes, int] = OrderedDict()
        self._remembered = remembered

    def for_prompt(self, prompt_ids: Sequence[int]) -> int:
        """The next seed of ``prompt_ids``, hashed in the store's encoding (a spliced prompt's is at hand already,
        ``EncodedIds``: no list of a long context is made to seed it)."""
        prompt = hashlib.blake2b(encode_ids(prompt_ids), key=self._key, digest_size=16).digest()
        count = self._seen.pop(prompt, 0)
        self._seen[prompt] = count + 1
        if len(self._seen) > self._remembered:
            self._seen.popitem(last=False)
        seed = hashlib.blake2b(prompt + count.to_bytes(8, "little"), digest_size=8).digest()
        return int.from_bytes(seed, "little") & ((1 << SEED_BITS) - 1)


__all__ = ["SEED_BITS", "SampleSeeds"]
