"""What a prompt that continues a cached prefix costs the bundled engine, by attention: the split (each new position
against the cached ones unmasked, then against each other causally; `engine/attention.py`) beside SDPA through the
explicit causal mask, and beside prefilling the whole prompt, at several cached shares.

    python bench/continued_prefill.py [--lengths 16000] [--shares 0.5,0.6,0.7,0.8,0.9,0.985] [--rounds 3]
                                      [--model PATH] [--threads 1]

In one process on the engine's own `LanguageModel` and `PrefixCache` (the tiny model by default, built locally):
for each prompt length, the prompt's first share is cached, then the whole prompt is prefilled from that cache
with each attention, and once with no cache at all. Rounds alternate the three, so a slow phase of the machine
touches all of them; the table gives each one's median seconds, the split over the masked SDPA, and each over the
whole prefill (below 1.0 a cached prefix pays; the engine's `MIN_CACHED_SHARE` is where it starts to). Every
continued prefill's last logits are checked against the whole prefill's (max |diff| shown).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from rollwire.engine.attention import IMPLEMENTATION
from rollwire.engine.kv import tensors
from rollwire.engine.model import LanguageModel
from rollwire.engine.prefix_cache import PrefixCache
from rollwire.tiny_model import ensure_tiny_model

ATTENTIONS = {"split": IMPLEMENTATION, "masked": "sdpa"}
"""Each continued prefill's attention, by the name the model's config selects it with."""


def _timed(model: LanguageModel, ids: list[int], cache: PrefixCache | None) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    logits, _ = model.prefill(ids, cache.lookup(ids) if cache else None)
    return time.perf_counter() - start, logits


def measure(model: LanguageModel, length: int, shares: list[float], rounds: int) -> list[str]:
    """One table row per share at ``length`` tokens."""
    config = model.weights.module.config
    ids = torch.randint(3, model.vocab_size - 1, (length,), generator=torch.Generator().manual_seed(length)).tolist()
    caches: dict[float, PrefixCache] = {}
    for share in shares:
        caches[share] = PrefixCache(8 << 30, min_share=0.0)
        cut = int(length * share)
        _, computed = model.prefill(ids[:cut])
        caches[share].insert(ids[:cut], tensors(computed))
    whole: list[float] = []
    times: dict[tuple[float, str], list[float]] = {}
    worst: dict[float, float] = {share: 0.0 for share in shares}
    for round_ in range(rounds):
        config._attn_implementation = IMPLEMENTATION
        seconds, reference = _timed(model, ids, None)
        whole.append(seconds)
        for share in shares:
            for name, implementation in ATTENTIONS.items():
                config._attn_implementation = implementation
                seconds, logits = _timed(model, ids, caches[share])
                times.setdefault((share, name), []).append(seconds)
                worst[share] = max(worst[share], float((logits - reference).abs().max()))
        print(f"  {length} tokens, round {round_ + 1} of {rounds} done", file=sys.stderr, flush=True)
    config._attn_implementation = IMPLEMENTATION
    whole_s = statistics.median(whole)
    rows = []
    for share in shares:
        cached = caches[share].lookup(ids)
        split, masked = (statistics.median(times[(share, name)]) for name in ATTENTIONS)
        rows.append(f"{length:>7} {cached.tokens if cached else 0:>7} {share:>6.3f} {whole_s:>8.3f} {masked:>9.3f} "
                    f"{split:>8.3f} {split / masked:>12.2f} {masked / whole_s:>14.2f} {split / whole_s:>13.2f} "
                    f"{worst[share]:>9.1e}")  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="16000", help="prompt lengths in tokens (default 16000)")
    parser.add_argument("--shares", default="0.5,0.6,0.7,0.8,0.9,0.985",
                        help="shares of each prompt cached (default 0.5,0.6,0.7,0.8,0.9,0.985)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="rounds, medians reported (default 3)")
    parser.add_argument("--model", default=None, help="local HF checkpoint folder (default: the tiny model)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, as the engine's --threads (default 1)")
    args = parser.parse_args(argv)
    lengths = [int(n) for n in args.lengths.split(",") if n]
    shares = [float(s) for s in args.shares.split(",") if s]
    if not lengths or not shares or not all(0 < s < 1 for s in shares) or args.rounds < 1:
        raise SystemExit("give lengths, shares strictly between 0 and 1, and at least one round")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as home:
        path = args.model or ensure_tiny_model(Path(home))
        model = LanguageModel(path, device="cpu", max_model_len=max(lengths) + 1)
        rows = [row for length in lengths for row in measure(model, length, shares, args.rounds)]
    print(f"\n{'prompt':>7} {'cached':>7} {'share':>6} {'whole s':>8} {'masked s':>9} {'split s':>8} "
          f"{'split/masked':>12} {'masked/whole':>14} {'split/whole':>13} {'max|diff|':>9}")  # fmt: skip
    print("\n".join(rows))
    print(
        f"(medians of {args.rounds} rounds; 'cached' is the whole 32-token blocks reused; max|diff| is the largest "
        "gap between a continued prefill's last logits and the whole prefill's, over both attentions)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
