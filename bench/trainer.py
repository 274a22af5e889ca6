"""Trainer throughput beside its ceiling: a bare forward+backward over the very same micro-batches.

    python bench/trainer.py [--sequences 48] [--repeats 3] [--micro-batch-tokens 2048] [--model NAME|PATH]

Four runs over one set of synthetic GRPO samples (lengths drawn between --min-len and --max-len):
the trainer's GRPO step and a bare forward + cross-entropy backward, each with packed rows and with
right-padded rows. Tokens/s counts real tokens only (padding is work, not output). Prints a table with
the trainer/ceiling ratio per layout and the packed/padded ratio.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from rollwire.trainer.batching import MicroBatch, Sample


def make_samples(n: int, lo: int, hi: int, vocab: int, seed: int) -> list[Sample]:
    from rollwire.trainer.batching import Sample

    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = rng.randint(lo, hi)
        prompt = max(1, length // 3)
        ids = [rng.randrange(3, vocab) for _ in range(length)]
        mask = [0] * prompt + [1] * (length - prompt)
        logprobs = [0.0] * prompt + [-rng.uniform(5.0, 9.0) for _ in range(length - prompt)]
        versions = [-1] * prompt + [0] * (length - prompt)
        out.append(Sample(ids, mask, logprobs, versions, rng.choice([-0.5, 0.5]), f"r{i}", 0.0))
    return out


def bare_pass(model: torch.nn.Module, batches: list[MicroBatch]) -> None:
    """The ceiling: forward, token cross-entropy, backward; no statistics, no ratios, no clipping."""
    model.zero_grad(set_to_none=True)
    for b in batches:
        logits = model(input_ids=b.input_ids, position_ids=b.position_ids, attention_mask=b.attention_mask,
                       use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), b.targets.flatten(), reduction="none")
        (loss * b.token_weights.flatten()).sum().backward()


def timed(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-len", type=int, default=16)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--micro-batch-tokens", type=int, default=2048)
    parser.add_argument("--model", default=None, help="a model name (tiny, smollm2-135m) or a local HF folder")
    args = parser.parse_args(argv)

    from transformers import AutoModelForCausalLM

    from rollwire.model_names import resolve_model
    from rollwire.settings import Settings
    from rollwire.trainer.batching import micro_batches, token_weights
    from rollwire.trainer.distributed import DistContext
    from rollwire.trainer.grpo import GRPOBatch, GRPOConfig, grpo_step

    torch.manual_seed(0)
    folder = resolve_model(args.model, Settings().home)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: every run sees the same weights
    samples = make_samples(args.sequences, args.min_len, args.max_len, model.config.vocab_size, seed=0)
    weights = token_weights(samples, "token-mean")
    real_tokens = sum(len(s.token_ids) for s in samples)
    batch = GRPOBatch(samples, {}, [s.rollout_id for s in samples])

    results: dict[tuple[str, str], tuple[float, int]] = {}
    for layout, packed in (("packed", True), ("padded", False)):
        mbs = micro_batches(samples, weights, capacity=args.micro_batch_tokens, packed=packed, pad_id=0)
        forwarded = sum(int(b.input_ids.numel()) for b in mbs)
        config = GRPOConfig(micro_batch_tokens=args.micro_batch_tokens, packed=packed)
        results[("ceiling", layout)] = (timed(lambda: bare_pass(model, mbs), args.repeats), forwarded)
        results[("trainer", layout)] = (
            timed(lambda: grpo_step(model, optimizer, batch, config, ctx=DistContext(), pad_id=0), args.repeats),
            forwarded,
        )

    rate = {k: real_tokens / v[0] for k, v in results.items()}
    print(f"{folder.name}: {args.sequences} sequences, {real_tokens} real tokens, micro-batches of <= "
          f"{args.micro_batch_tokens} tokens")  # fmt: skip
    print(f"{'run':<22}{'layout':<8}{'forwarded':>10}{'seconds':>10}{'tokens/s':>11}{'vs ceiling':>12}")
    for (run, layout), (seconds, forwarded) in results.items():
        ratio = rate[(run, layout)] / rate[("ceiling", layout)]
        name = "trainer (GRPO step)" if run == "trainer" else "bare fwd+bwd (ceiling)"
        print(f"{name:<22}{layout:<8}{forwarded:>10}{seconds:>10.3f}{rate[(run, layout)]:>11.0f}{ratio:>12.2f}")
    print(f"packed/padded tokens/s: trainer {rate[('trainer', 'packed')] / rate[('trainer', 'padded')]:.2f}, "
          f"ceiling {rate[('ceiling', 'packed')] / rate[('ceiling', 'padded')]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
