"""Build the tiny model's shipped weights: a short pretraining that teaches it to copy words it has never seen.

    python scripts/pretrain_tiny.py [--steps 4000] [--batch 8] [--width 448] [--lr 3e-3] [--threads 1]

A randomly initialised tiny model never copies a word from its prompt, so the demo's held-out tasks
(``Write "map" to answer.txt.``) stay capped at the format's share of the reward whatever RL does. This
script trains it once, on this machine's CPU (25 to 35 minutes on one core), and writes
``rollwire/data/tiny_weights.safetensors`` (float16, under a megabyte). ``ensure_tiny_model`` loads it when
its recorded key matches the current spec, corpus and chat template, so a fresh install gets the copying
model at the cost of reading one small file.

The data: rows of 448 tokens shaped like a chat with a tools block (random JSON schemas), in which a user
turn quotes a word and the assistant's turn answers with a JSON object (often a function call) whose string
value is that word, mixed with the shipped corpus. The words are the corpus' words, single tokens of the
vocabulary, two or three tokens run together and random letter strings; the tiny suite's held-out answers are
never among them, so the demo's held-out tasks ask for words this data never copied. Their tokens do occur
inside longer copied strings, as every token of the vocabulary does: a token that is never a copy target is
never copied (``fox``, ``ice`` and ``key`` were not, while they were banned as pieces too). The tool names
and argument keys are random: the demo's own call (``write_file`` with ``path`` and ``content``) is what SFT
and RL still have to learn.

Rerun after changing ``TinyModelSpec``, the corpus or the template (``tests/core/test_tiny_weights.py``
fails until you do). With the defaults (seed 0, one thread) the run is deterministic; it prints the copy
probe every 250 steps: the held-out words written greedily after the demo's own prompt and call prefix.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import string
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "rollwire" / "data" / "tiny_weights.safetensors"

KEYS = "text value item word data label name body note entry title query key id tag city color file target message".split()
VERBS = "Save Put Send Store Note Record Add Log Keep Use Say Print Write Copy Set Tell Name Label Find Show".split()
PLACES = "notes.md list box log memory queue out.json table data.csv inbox todo.txt file.txt store cache".split()

# The demo's first model call, as the reference agent sends it (its system prompt, the workspace's write_file).
SYSTEM_PROMPT = "You are an agent. Use the tools to complete the task, then reply with a short final answer."
WRITE_FILE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Create or replace a text file of the workspace (parent folders are created).",
        "parameters": {
            "type": "object",
            "properties": {"path": {"title": "Path", "type": "string"}, "content": {"title": "Content", "type": "string"}},
            "required": ["path", "content"],
            "title": "write_fileArguments",
        },
    },
}
CALL_PREFIX = '<tool_call>\n{"name": "write_file", "arguments": {"path": "answer.txt", "content": "'


def held_out_answers() -> list[str]:
    """The tiny suite's held-out answers: never copied in this data, and the probe."""
    from rollwire.mcp_servers.tasks.loader import load_suite

    tasks = [t for t in load_suite("tiny").tasks if t.split == "held_out"]
    return sorted(str(c.args["value"]) for t in tasks for c in t.checker if "value" in c.args)


class CopyData:
    """Training rows: chat-shaped copy episodes after a random tools block, and corpus lines."""

    def __init__(self, tokenizer, corpus: str, banned: set[str], rng: random.Random, width: int, induction: float) -> None:  # type: ignore[no-untyped-def]
        self.tokenizer, self.rng, self.width, self.banned, self.induction = tokenizer, rng, width, banned, induction
        self.ordinary = range(max(tokenizer.all_special_ids) + 1, len(tokenizer))  # every id but the special tokens
        self.lines = [line for line in corpus.splitlines() if line.strip()]
        self.vocabulary = sorted({w for w in re.findall(r"[a-z]{2,8}", corpus.lower()) if w not in banned})
        tokens = (tokenizer.convert_tokens_to_string([t]).strip() for t in tokenizer.get_vocab())
        self.all_pieces = sorted({t for t in tokens if t.isalpha() and t.islower()})
        self.pieces = [t for t in self.all_pieces if t not in banned]
        # the chat's structure never uses a held-out word either (``key`` was an argument name: after RL the
        # demo's ``Write "key" ...`` broke the call's path on every draw)
        self.keys = [k for k in KEYS if k not in banned]
        self.verbs = [v for v in VERBS if v.lower() not in banned]
        self.places = [p for p in PLACES if p.split(".")[0] not in banned]

    def word(self) -> str:
        """A corpus word, a vocabulary piece, two or three pieces run together or a random letter string; never a
        banned word (a banned word's pieces do occur inside longer strings, as every piece of the vocabulary does)."""
        rng = self.rng
        while True:
            draw = rng.random()
            if draw < 0.3:
                w = rng.choice(self.vocabulary)
            elif draw < 0.5:
                w = rng.choice(self.pieces)
            elif draw < 0.85:  # every piece of the vocabulary, the held-out words' too, inside a longer string
                w = "".join(rng.choice(self.all_pieces) for _ in range(rng.randint(2, 3)))
            else:
                w = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 6)))
            if w not in self.banned:
                return w

    def _schema(self) -> dict[str, object]:
        rng = self.rng
        keys = rng.sample(self.keys, rng.randint(1, 3))
        props = {k: {"title": k.title(), "type": rng.choice(["string", "string", "integer"])} for k in keys}
        name = f"{self.word()}_{self.word()}"
        parameters = {"properties": props, "required": keys, "title": name + "Arguments", "type": "object"}
        description = rng.choice(self.lines)[:80]
        return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}

    def _system(self) -> str:
        rng = self.rng
        head = rng.choice(
            [rng.choice(self.lines), "You are a helpful assistant.", "You are an agent. Use the tools to complete the task."]
        )
        if rng.random() < 0.7:
            tools = "\n".join(json.dumps(self._schema()) for _ in range(rng.randint(1, 3)))
            return f"<|im_start|>system\n{head}\n\n<tools>\n{tools}\n</tools><|im_end|>\n"
        return f"<|im_start|>system\n{head}<|im_end|>\n"

    def _episode(self) -> str:
        rng = self.rng
        w, verb, place = self.word(), rng.choice(self.verbs), rng.choice(self.places)
        user = rng.choice([
            f'{verb} "{w}" to {place}.', f'{verb} "{w}".', f'Please {verb.lower()} "{w}" in {place}.',
            f'"{w}" goes to {place}.', f'The word is "{w}".',
        ])  # fmt: skip
        k1, k2 = rng.sample(self.keys, 2)
        other = rng.choice([place, self.word(), str(rng.randint(0, 99))])
        args = rng.choice([{k2: w}, {k1: other, k2: w}, {k2: w, k1: other}])
        body = json.dumps({"name": f"{self.word()}_{self.word()}", "arguments": args}) if rng.random() < 0.7 else json.dumps(args)
        if rng.random() < 0.5:
            body = f"<tool_call>\n{body}\n</tool_call>"
        return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{body}<|im_end|>\n"

    def induction_row(self) -> list[int]:
        """Random token sequences, each said twice: the plainest copy signal there is, over every token id (the
        held-out words' tokens included: this row knows nothing of words or tasks), so copying is a skill of the
        model, not a list of tokens it was shown."""
        rng, out = self.rng, []
        while len(out) < self.width:
            span = [rng.choice(self.ordinary) for _ in range(rng.randint(4, 24))]
            gap = [rng.choice(self.ordinary) for _ in range(rng.randint(0, 16))]
            out += span + gap + span
        return out[: self.width]

    def row(self) -> list[int]:
        rng, encode = self.rng, self.tokenizer.encode
        if rng.random() < self.induction:
            return self.induction_row()
        text = self._system() if rng.random() < 0.9 else rng.choice(self.lines) + "\n"
        ids = encode(text, add_special_tokens=False)
        while len(ids) < self.width:
            part = self._episode() if rng.random() < 0.85 else rng.choice(self.lines) + "\n"
            ids += encode(part, add_special_tokens=False)
        return ids[: self.width]


def copy_probe(model, tokenizer, words: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    """What the model writes greedily as the ``content`` of the demo's call, for each held-out word."""
    import torch

    written = []
    prefix = tokenizer.encode(CALL_PREFIX, add_special_tokens=False)
    for w in words:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f'Write "{w}" to answer.txt.'}]
        text = tokenizer.apply_chat_template(messages, tools=[WRITE_FILE], tokenize=False, add_generation_prompt=True)
        ids = tokenizer.encode(text, add_special_tokens=False) + prefix
        start = len(ids)
        with torch.no_grad():
            for _ in range(len(w) + 2):
                ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
        written.append(tokenizer.decode(ids[start:]).split('"')[0])
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4000, help="optimizer steps (default 4000)")
    parser.add_argument("--batch", type=int, default=8, help="rows per step (default 8)")
    parser.add_argument("--width", type=int, default=448, help="tokens per row (default 448: the demo's prompt is ~330)")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: deterministic)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--ema", type=float, default=0.998,
        help="decay of the weights' moving average that is probed and saved (default 0.998: about the last 500 steps)",
    )  # fmt: skip
    parser.add_argument("--any-word", action="store_true", help="let the held-out answers be copy targets too")
    parser.add_argument("--induction", type=float, default=0.0, help="share of rows of repeated random tokens (default 0: they slowed the copy's onset)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)

    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollwire import tiny_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    spec = tiny_model.TinyModelSpec()
    with tempfile.TemporaryDirectory() as folder:
        tiny_model.build_untrained(spec, Path(folder))
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    probe = held_out_answers()
    data = CopyData(tokenizer, tiny_model.corpus_text(), set() if args.any_word else set(probe), rng, args.width, args.induction)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    lr_factor: Callable[[int], float] = lambda s: min(1.0, (s + 1) / 100) * max(0.05, 1 - s / args.steps)  # noqa: E731
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    # the copy comes and goes from one checkpoint to the next; an average of the last few hundred is steadier
    average = torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(args.ema))
    model.train()
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        ids = torch.tensor([data.row() for _ in range(args.batch)])
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        average.update_parameters(model)
        rate = step / (time.monotonic() - started)
        print(f"\rstep {step}/{args.steps}  loss {loss.item():.3f}  {rate:.1f} steps/s", end="", file=sys.stderr, flush=True)
        if step % 250 == 0 or step == args.steps:
            written = copy_probe(average.module.eval(), tokenizer, probe)
            hits = sum(w == p for w, p in zip(written, probe))
            print(f"\rstep {step}/{args.steps}  loss {loss.item():.3f}  held-out copies {hits}/{len(probe)}: {written}")
    tensors = average.module.state_dict().items()
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in tensors if k != "lm_head.weight"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(args.out), metadata={"key": tiny_model.base_key(spec), "steps": str(args.steps)})
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB) in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
