"""Build the tiny model's shipped weights: a short pretraining that teaches it to copy words it has never seen.

    python scripts/pretrain_tiny.py [--steps 3000] [--batch 32] [--lr 3e-3] [--threads 2]

A randomly initialised tiny model never copies a word from its prompt that it was not trained on, so
the demo's held-out tasks ("Write map to answer.txt.") stay capped at the format's share of the reward
whatever RL does. This script trains it once, on this machine's CPU, on the shipped corpus plus short
synthetic lines in which a word is repeated later in quotes or as a JSON string value (random letter
strings and the corpus' words, never a held-out word of a shipped suite), and writes
``rollwire/data/tiny_weights.safetensors`` (float16, under a megabyte). ``ensure_tiny_model`` loads it
when its recorded key matches the current spec, corpus and chat template, so a fresh install gets the
copying model at the cost of reading one small file. The task's own format (tool calls, the chat template)
is not in this data: SFT and RL still have to learn it. Rerun after changing ``TinyModelSpec``, the corpus
or the template (a test fails until you do). Prints the copy accuracy on held-out words at the end.
"""

from __future__ import annotations

import argparse
import random
import re
import string
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "rollwire" / "data" / "tiny_weights.safetensors"

TEMPLATES = (
    'The word is {w}. In quotes: "{w}".',
    'Say {w}. You said "{w}".',
    '{w} -> "{w}"',
    'Keep {w} for later. Kept: {{"value": "{w}"}}',
    'Remember {w}. Then {x} {y}. The first was "{w}".',
    'Note {w} and {x}: {{"a": "{w}", "b": "{x}"}}',
    'Put {w} in the box. {{"item": "{w}", "box": "{x}"}}',
    'Copy {w} exactly. {{"text": "{w}"}}',
    'Label it {w}, please. {{"label": "{w}"}}',
    'Store {w} under {x}. {{"key": "{x}", "data": "{w}"}}',
)


def held_out_words() -> tuple[set[str], list[str]]:
    """The words of the shipped suites' held-out tasks (never copied in this data), and the tiny suite's
    held-out answers (the copy probe)."""
    from rollwire.mcp_servers.tasks.loader import load_suite, suite_names

    words: set[str] = set()
    for name in suite_names():
        for task in load_suite(name).tasks:
            if task.split == "held_out":
                words.update(re.findall(r"[a-z]+", task.instruction.lower()))
                for criterion in task.checker:
                    words.update(str(v).lower() for v in criterion.args.values())
    tiny = [t for t in load_suite("tiny").tasks if t.split == "held_out"]
    probe = [str(c.args["value"]) for t in tiny for c in t.checker if "value" in c.args]
    return words, probe


def word_source(corpus: str, banned: set[str], tokens: list[str], rng: random.Random):  # type: ignore[no-untyped-def]
    """Words to copy: the corpus' words, random letter strings, and single tokens of the vocabulary (so copying
    is learned for every token, not only the corpus' words); never a banned (held-out) word."""
    vocabulary = sorted({w for w in re.findall(r"[a-z]{2,8}", corpus.lower()) if w not in banned})
    pieces = sorted({t for t in tokens if t.isalpha() and t.islower() and t not in banned})

    def word() -> str:
        while True:
            draw = rng.random()
            if draw < 0.35:
                w = rng.choice(vocabulary)
            elif draw < 0.7:
                w = rng.choice(pieces)
            else:
                w = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 6)))
            if w not in banned:
                return w

    return word


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollwire import tiny_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    spec = tiny_model.TinyModelSpec()
    banned, probe = held_out_words()
    corpus = tiny_model.corpus_text()
    corpus_lines = [line for line in corpus.splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as folder:
        tiny_model.build_untrained(spec, Path(folder))
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokens = [tokenizer.convert_tokens_to_string([t]).strip() for t in tokenizer.get_vocab()]
    word = word_source(corpus, banned, tokens, rng)
    pad = tokenizer.pad_token_id

    def line() -> str:
        if rng.random() < 0.25:
            return rng.choice(corpus_lines)
        return rng.choice(TEMPLATES).format(w=word(), x=word(), y=word())

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    def lr_factor(step: int) -> float:  # 100 warm-up steps, then a linear decay to 5%
        return min(1.0, (step + 1) / 100) * max(0.05, 1 - step / args.steps)

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    model.train()
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        rows = [tokenizer.encode(line(), add_special_tokens=False)[:96] for _ in range(args.batch)]
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        labels = torch.tensor([r + [-100] * (width - len(r)) for r in rows])
        loss = model(input_ids=ids, attention_mask=(labels != -100).long(), labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if step % 20 == 0 or step == args.steps:
            rate = step / (time.monotonic() - started)
            status = f"step {step}/{args.steps}  loss {loss.item():.3f}  {rate:.1f} steps/s"
            print(f"\r{status}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    model.eval()
    accuracy = copy_accuracy(model, tokenizer, probe)
    print(f"copy accuracy on held-out words (greedy, a JSON value never trained with them): {accuracy:.2f}")
    tensors = model.state_dict().items()
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in tensors if k != "lm_head.weight"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(args.out), metadata={"key": tiny_model.base_key(spec), "steps": str(args.steps)})
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB) in {time.monotonic() - started:.0f} s")
    return 0


def copy_accuracy(model, tokenizer, words: list[str]) -> float:  # type: ignore[no-untyped-def]
    """Share of ``words`` the model writes back as a JSON string value, greedily (what the demo's task asks)."""
    import torch

    hits = 0
    for w in words:
        ids = tokenizer.encode(f'Write {w} to answer.txt. {{"content": "', add_special_tokens=False)
        start = len(ids)
        with torch.no_grad():
            for _ in range(len(w) + 2):
                ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
        hits += tokenizer.decode(ids[start:]).split('"')[0] == w
    return hits / max(1, len(words))


if __name__ == "__main__":
    sys.exit(main())
