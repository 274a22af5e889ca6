"""The splice's token economy: tokens a trainer forwards for one tool conversation, spliced vs one sample per call.

    python bench/splice.py [--turns 5 10 20 40] [--tool-result-words 60]

A synthetic agent conversation (system prompt, a task, then N rounds of reasoning + tool call, tool
result; then a final answer) is driven through the proxy's prompt planner with the real Qwen tokenizer
and Qwen3's chat template (trl's copy; the tokenizer comes from $ROLLWIRE_SHARED_DIR). With ``splice``
the N+1 calls form one segment: the trainer forwards its tokens once. One sample per call (what a
per-request recorder gives a trainer) forwards every call's whole prompt again. Loss tokens (the
sampled ones) are the same in both columns; the table shows that they are.
"""

from __future__ import annotations

import argparse
import random
import sys

from rollwire.proxy.conversation import Conversation, Message
from rollwire.proxy.parsers.hermes import HermesToolParser
from rollwire.proxy.parsers.qwen3 import Qwen3ReasoningParser
from rollwire.proxy.render import Renderer
from rollwire.proxy.splice.plan import PriorCall, plan_prompt
from rollwire.reconstruct import segments_from_calls
from rollwire.store import ModelCall, encode_floats, encode_ids

TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a shell command in the task's workspace and return its output.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
)
WORDS = ("file", "line", "error", "test", "passed", "module", "import", "value", "config", "path", "build", "ok")


def _answer(renderer: Renderer, sampled: list[int]) -> Message:
    reasoning, rest = Qwen3ReasoningParser().split(renderer.decode(sampled[:-1]))
    content, calls = HermesToolParser().parse(rest)
    return Message("assistant", content, reasoning, tuple(calls))


def _sampled(renderer: Renderer, turn: int, final: bool) -> list[int]:
    end = renderer.tokenizer.convert_tokens_to_ids("<|im_end|>")
    if final:
        return renderer.encode("<think>\nAll checks pass now.\n</think>\n\nThe tests pass; the fix is in place.") + [end]
    text = (f"<think>\nStep {turn}: look at the next part of the output.\n</think>\n\n<tool_call>\n"
            f'{{"name": "run_shell", "arguments": {{"command": "sed -n {turn},+40p src/app.py"}}}}\n</tool_call>')
    return renderer.encode(text) + [end]


def measure(renderer: Renderer, turns: int, result_words: int, seed: int = 0) -> dict[str, int]:
    """Drive one conversation of ``turns`` tool rounds through the planner; count tokens both ways."""
    rng = random.Random(seed)
    messages = [Message("system", "You are a careful software engineer."), Message("user", "Make the tests pass.")]
    priors: list[PriorCall] = []
    rows: list[ModelCall] = []
    per_call = loss = 0
    for i in range(turns + 1):
        conv = Conversation("qwen", tuple(messages), TOOLS)
        plan = plan_prompt(conv, priors, renderer, "splice")
        sampled = _sampled(renderer, i, final=i == turns)
        per_call += len(plan.prompt_ids) + len(sampled)
        loss += len(sampled)
        priors = [PriorCall(p.call_id, p.request_keys, p.tools_key, p.answer_key, p.prompt_ids, p.sampled_ids,
                            p.segment_index, p.continued or p.segment_index == plan.segment_index) for p in priors]
        answer = _answer(renderer, sampled)
        priors.append(PriorCall(i + 1, tuple(m.key() for m in conv.messages), conv.tools_key(), answer.key(),
                                plan.prompt_ids, sampled, plan.segment_index, False))
        rows.append(ModelCall(id=i + 1, rollout_id="r", prompt_ids=encode_ids(plan.prompt_ids), started_ns=i,
                              completion_ids=encode_ids(sampled), completion_logprobs=encode_floats([-0.5] * len(sampled)),
                              segment_index=plan.segment_index, segment_break=plan.segment_break))
        if answer.tool_calls:
            result = " ".join(rng.choice(WORDS) for _ in range(result_words))
            messages += [answer, Message("tool", result, tool_call_id=answer.tool_calls[0].id)]
    segments = segments_from_calls(rows)
    return {
        "calls": turns + 1,
        "segments": len(segments),
        "spliced": sum(len(s.token_ids) for s in segments),
        "spliced_loss": sum(s.num_sampled for s in segments),
        "per_call": per_call,
        "per_call_loss": loss,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[5, 10, 20, 40], help="tool rounds per conversation")
    parser.add_argument("--tool-result-words", type=int, default=60, help="words in each tool result")
    args = parser.parse_args(argv)
    from rollwire.tokenizers import qwen_tokenizer

    renderer = Renderer(qwen_tokenizer("qwen3"))
    header = f"{'tool turns':>10} {'calls':>6} {'segments':>8} {'spliced':>9} {'per call':>9} {'ratio':>7} " \
             f"{'loss (spliced)':>14} {'loss (per call)':>15}"
    print(header)
    print("-" * len(header))
    for turns in args.turns:
        print(f"  measuring {turns} tool turns ...", file=sys.stderr, flush=True)
        m = measure(renderer, turns, args.tool_result_words)
        if m["spliced_loss"] != m["per_call_loss"]:
            raise SystemExit(f"loss tokens differ at {turns} turns: {m['spliced_loss']} vs {m['per_call_loss']}")
        ratio = m["per_call"] / m["spliced"]
        print(f"{turns:>10} {m['calls']:>6} {m['segments']:>8} {m['spliced']:>9} {m['per_call']:>9} {ratio:>6.1f}x "
              f"{m['spliced_loss']:>14} {m['per_call_loss']:>15}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
