"""Trainer throughput beside its ceiling: a bare forward+backward over the very same micro-batches.

    python bench/trainer.py [--sequences 48] [--repeats 3] [--micro-batch-tokens 2048] [--model NAME|PATH]
                            [--lora-rank R] [--group-size G]

Four runs over one set of synthetic GRPO samples (lengths drawn between --min-len and --max-len):
the trainer's GRPO step and a bare forward + cross-entropy backward, each with packed rows and with
right-padded rows. Tokens/s counts real tokens only (padding is work, not output). Prints a table with
the trainer/ceiling ratio per layout and the packed/padded ratio. With --lora-rank, one more row: the GRPO
step (packed) training LoRA adapters of that rank instead of every weight, and its speed beside full fine-tuning.
With --group-size G, every G samples share one prompt (a GRPO group): the packed micro-batches forward it once
(the ceiling and the trainer alike), and one more row times the step forwarding every prompt in full.
Every step runs AdamW at learning rate 0, so each run sees the same weights and pays its optimizer's real cost.
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


def make_samples(n: int, lo: int, hi: int, vocab: int, seed: int, group: int = 1) -> list[Sample]:
    """``n`` samples of random tokens, a third of each its prompt; ``group`` > 1: consecutive samples share one
    prompt (a GRPO group's), the longest the group's lengths allow."""
    from rollwire.trainer.batching import Sample

    rng = random.Random(seed)
    out = []
    shared: list[int] = []
    for i in range(n):
        length = rng.randint(lo, hi)
        prompt = max(1, length // 3)
        if group > 1 and i % group == 0:
            shared = [rng.randrange(3, vocab) for _ in range(prompt)]
        if group > 1:
            prompt = len(shared)
            length = max(length, prompt + 2)
        ids = [rng.randrange(3, vocab) for _ in range(length)]
        if group > 1:
            ids[:prompt] = shared
        mask = [0] * prompt + [1] * (length - prompt)
        logprobs = [0.0] * prompt + [-rng.uniform(5.0, 9.0) for _ in range(length - prompt)]
        versions = [-1] * prompt + [0] * (length - prompt)
        out.append(Sample(ids, mask, logprobs, versions, rng.choice([-0.5, 0.5]), f"r{i}", 0.0))
    return out


def bare_pass(model: torch.nn.Module, batches: list[MicroBatch]) -> None:
    """The ceiling: forward, token cross-entropy, backward; no statistics, no ratios, no clipping."""
    model.zero_grad(set_to_none=True)
    for b in batches:
        logits = model(
            input_ids=b.input_ids, position_ids=b.position_ids, attention_mask=b.attention_mask, use_cache=False
        ).logits
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
    parser.add_argument("--lora-rank", type=int, default=0, help="also time a LoRA step of this rank (0: no LoRA row)")
    parser.add_argument("--group-size", type=int, default=1,
                        help="samples per shared prompt; above 1, one more row: the step with every prompt forwarded "
                        "in full (--no-share-prefixes)")  # fmt: skip
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
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0, weight_decay=0.0)  # lr 0: the same weights each run
    samples = make_samples(args.sequences, args.min_len, args.max_len, model.config.vocab_size, seed=0,
                           group=args.group_size)  # fmt: skip
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

    if args.group_size > 1:
        mbs = micro_batches(samples, weights, capacity=args.micro_batch_tokens, packed=True, pad_id=0,
                            share_prefixes=False)  # fmt: skip
        config = GRPOConfig(micro_batch_tokens=args.micro_batch_tokens, packed=True, share_prefixes=False)
        results[("unshared", "packed")] = (
            timed(lambda: grpo_step(model, optimizer, batch, config, ctx=DistContext(), pad_id=0), args.repeats),
            sum(int(b.input_ids.numel()) for b in mbs),
        )
    if args.lora_rank:
        from rollwire.trainer.adapters import LoraSpec, add_lora, trainable

        lora = add_lora(model, LoraSpec(args.lora_rank))
        lora_optimizer = torch.optim.AdamW(trainable(lora), lr=0.0, weight_decay=0.0)
        mbs = micro_batches(samples, weights, capacity=args.micro_batch_tokens, packed=True, pad_id=0)
        config = GRPOConfig(micro_batch_tokens=args.micro_batch_tokens, packed=True)
        results[("lora", "packed")] = (
            timed(lambda: grpo_step(lora, lora_optimizer, batch, config, ctx=DistContext(), pad_id=0), args.repeats),
            sum(int(b.input_ids.numel()) for b in mbs),
        )

    rate = {k: real_tokens / v[0] for k, v in results.items()}
    print(f"{folder.name}: {args.sequences} sequences, {real_tokens} real tokens, micro-batches of <= "
          f"{args.micro_batch_tokens} tokens")  # fmt: skip
    print(f"{'run':<22}{'layout':<8}{'forwarded':>10}{'seconds':>10}{'tokens/s':>11}{'vs ceiling':>12}")
    for (run, layout), (seconds, forwarded) in results.items():
        ratio = rate[(run, layout)] / rate[("ceiling", layout)]
        name = {"trainer": "trainer (GRPO step)", "ceiling": "bare fwd+bwd (ceiling)",
                "unshared": "trainer, no sharing"}.get(run, f"LoRA r={args.lora_rank} step")  # fmt: skip
        print(f"{name:<22}{layout:<8}{forwarded:>10}{seconds:>10.3f}{rate[(run, layout)]:>11.0f}{ratio:>12.2f}")
    if args.group_size > 1:
        print(f"prompts shared/forwarded in full, GRPO step tokens/s (packed): "
              f"{rate[('trainer', 'packed')] / rate[('unshared', 'packed')]:.2f}")  # fmt: skip
    if args.lora_rank:
        print(f"LoRA/full GRPO step tokens/s (packed): {rate[('lora', 'packed')] / rate[('trainer', 'packed')]:.2f}")
    print(
        f"packed/padded tokens/s: trainer {rate[('trainer', 'packed')] / rate[('trainer', 'padded')]:.2f}, "
        f"ceiling {rate[('ceiling', 'packed')] / rate[('ceiling', 'padded')]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
