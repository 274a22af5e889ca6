"""What one decode step costs the bundled engine at a long context, by attention: the engine's (a key head's
query heads folded into one query, reading the cache once per key head; `engine/attention.py`) beside
transformers' SDPA with ``enable_gqa``, which reads it once per query head.

    python bench/decode_step.py [--lengths 16000,44000] [--steps 32] [--rounds 3] [--model PATH] [--threads 1]

In one process on the engine's own `LanguageModel`, as its batcher decodes one sequence (the tiny model by
default, built locally): each length's prompt is prefilled once, then each round decodes --steps tokens from a
copy of that cache with each attention in turn, so a slow phase of the machine touches both. The table gives the
median milliseconds a step, their ratio, and the largest gap between the two attentions' logits.
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
from rollwire.engine.kv import KVBatch, growing_cache, tensors
from rollwire.engine.model import LanguageModel
from rollwire.tiny_model import ensure_tiny_model

ATTENTIONS = {"folded": IMPLEMENTATION, "sdpa": "sdpa"}
"""Each decode's attention, by the name the model's config selects it with."""


def _decode(model: LanguageModel, prompt: list[tuple[torch.Tensor, torch.Tensor]], length: int,
            steps: int) -> tuple[float, torch.Tensor]:  # fmt: skip
    """Seconds a step and the logits of ``steps`` steps from ``prompt``'s cache (a fresh copy, as admission makes)."""
    batch = KVBatch.from_prefill(growing_cache(prompt), 1)
    logits = []
    start = time.perf_counter()
    for step in range(steps):
        token = torch.tensor([[3 + step]], device=model.device)
        position = torch.tensor([[length + step]], device=model.device)
        logits.append(model.decode(token, batch.extend_mask(), position, batch.cache))
    return (time.perf_counter() - start) / steps, torch.cat(logits)


def measure(model: LanguageModel, length: int, steps: int, rounds: int) -> str:
    """One table row for a ``length``-token context."""
    config = model.weights.module.config
    ids = torch.randint(3, model.vocab_size - 1, (length,), generator=torch.Generator().manual_seed(length)).tolist()
    _, computed = model.prefill(ids)
    prompt = [(keys.clone(), values.clone()) for keys, values in tensors(computed)]
    del computed
    times: dict[str, list[float]] = {name: [] for name in ATTENTIONS}
    worst = 0.0
    for round_ in range(rounds):
        logits: dict[str, torch.Tensor] = {}
        for name, implementation in ATTENTIONS.items():
            config._attn_implementation = implementation
            seconds, logits[name] = _decode(model, prompt, length, steps)
            times[name].append(seconds)
        worst = max(worst, float((logits["folded"] - logits["sdpa"]).abs().max()))
        print(f"  {length} tokens, round {round_ + 1} of {rounds} done", file=sys.stderr, flush=True)
    config._attn_implementation = IMPLEMENTATION
    folded, sdpa = (statistics.median(times[name]) * 1e3 for name in ATTENTIONS)
    return f"{length:>7} {steps:>6} {sdpa:>8.2f} {folded:>10.2f} {folded / sdpa:>12.2f} {worst:>9.1e}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="16000,44000", help="context lengths in tokens (default 16000,44000)")
    parser.add_argument("--steps", type=int, default=32, help="tokens decoded a round (default 32)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, medians reported (default 3)")
    parser.add_argument("--model", default=None, help="local HF checkpoint folder (default: the tiny model)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, as the engine's --threads (default 1)")
    args = parser.parse_args(argv)
    lengths = [int(n) for n in args.lengths.split(",") if n]
    if not lengths or min(lengths) < 1 or args.steps < 1 or args.rounds < 1:
        raise SystemExit("give positive lengths, at least one step and at least one round")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as home:
        path = args.model or ensure_tiny_model(Path(home))
        model = LanguageModel(path, device="cpu", max_model_len=max(lengths) + args.steps + 1)
        rows = [measure(model, length, args.steps, args.rounds) for length in lengths]
    print(f"\n{'context':>7} {'steps':>6} {'sdpa ms':>8} {'folded ms':>10} {'folded/sdpa':>12} {'max|diff|':>9}")
    print("\n".join(rows))
    print(f"(medians of {args.rounds} rounds of milliseconds a decode step, one sequence; max|diff| is the largest "
          "gap between the two attentions' logits)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
