"""Must-show 3: with the real Qwen tokenizer and Qwen3's template (trl), a tool conversation with reasoning:
naive re-rendering diverges from the sampled tokens, ``splice`` keeps one exact segment, ``render`` splits with
the reason recorded, and a sampled non-canonical tokenization (["Ġ", "Paris"]) is kept as sampled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollwire.proxy.conversation import Conversation, Message
from rollwire.proxy.parsers.hermes import HermesToolParser
from rollwire.proxy.parsers.qwen3 import Qwen3ReasoningParser
from rollwire.proxy.render import Renderer
from rollwire.proxy.splice.plan import Plan, PriorCall, plan_prompt
from rollwire.reconstruct import segments_from_calls
from rollwire.store import ModelCall, encode_floats, encode_ids
from rollwire.tokenizers import qwen_tokenizer
from rollwire.trajectory import Segment

TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
)


@pytest.fixture(scope="module")
def renderer(qwen_tokenizer_files: Path) -> Renderer:
    return Renderer(qwen_tokenizer("qwen3"))


def _answer(renderer: Renderer, sampled: list[int]) -> Message:
    """What the proxy answers for these sampled ids (reasoning + tool calls parsed out)."""
    reasoning, rest = Qwen3ReasoningParser().split(renderer.decode(sampled[:-1]))
    content, calls = HermesToolParser().parse(rest)
    return Message("assistant", content, reasoning, tuple(calls))


def _samples(renderer: Renderer) -> list[list[int]]:
    end = renderer.tokenizer.convert_tokens_to_ids("<|im_end|>")
    call = '<think>\nI need the weather tool.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    paris = renderer.tokenizer.convert_tokens_to_ids(["Ġ", "Paris"])  # non-canonical: " Paris" encodes as ĠParis
    second = renderer.encode("<think>\nThe tool says sunny.\n</think>\n\nIt is sunny in") + paris + renderer.encode(".")
    return [renderer.encode(call) + [end], second + [end], renderer.encode("Cloudy.") + [end]]


def _conversations(renderer: Renderer, samples: list[list[int]]) -> list[Conversation]:
    history = [Message("system", "Be brief."), Message("user", "Weather in Paris?")]
    first = _answer(renderer, samples[0])
    turn2 = history + [first, Message("tool", '{"sky": "sunny"}', tool_call_id=first.tool_calls[0].id)]
    turn3 = turn2 + [_answer(renderer, samples[1]), Message("user", "And London?")]
    return [Conversation("qwen", tuple(m), TOOLS) for m in (history, turn2, turn3)]


def _drive(renderer: Renderer, policy: str) -> tuple[list[Plan], list[Segment], list[list[int]]]:
    samples = _samples(renderer)
    priors: list[PriorCall] = []
    plans, rows = [], []
    for i, (conv, sampled) in enumerate(zip(_conversations(renderer, samples), samples)):
        plan = plan_prompt(conv, priors, renderer, policy)
        plans.append(plan)
        priors = [
            PriorCall(
                p.call_id,
                p.request_keys,
                p.tools_key,
                p.answer_key,
                p.prompt_ids,
                p.sampled_ids,
                p.segment_index,
                p.continued or p.segment_index == plan.segment_index,
            )
            for p in priors
        ]
        priors.append(
            PriorCall(
                i + 1,
                tuple(m.key() for m in conv.messages),
                conv.tools_key(),
                _answer(renderer, sampled).key(),
                plan.prompt_ids,
                sampled,
                plan.segment_index,
                False,
            )
        )
        rows.append(
            ModelCall(
                id=i + 1,
                rollout_id="r",
                prompt_ids=encode_ids(plan.prompt_ids),
                started_ns=i,
                completion_ids=encode_ids(sampled),
                completion_logprobs=encode_floats([-0.5] * len(sampled)),
                segment_index=plan.segment_index,
                segment_break=plan.segment_break,
                policy_version=3,
            )
        )
    return plans, segments_from_calls(rows), samples


def test_naive_rerender_diverges_from_sampled_tokens(renderer: Renderer) -> None:
    plans, _, samples = _drive(renderer, "splice")
    third = _conversations(renderer, samples)[2]
    naive = renderer.encode(renderer.render([m.to_template() for m in third.messages], list(TOOLS), True))
    sampled_so_far = [*plans[1].prompt_ids, *samples[1]]
    assert naive[: len(sampled_so_far)] != sampled_so_far


def test_splice_keeps_one_exact_segment(renderer: Renderer) -> None:
    plans, segments, samples = _drive(renderer, "splice")
    assert len(segments) == 1 and segments[0].break_reason is None
    segment = segments[0]
    assert segment.token_ids == [*plans[2].prompt_ids, *samples[2]]
    for plan, sampled in zip(plans, samples):
        start = len(plan.prompt_ids)
        assert segment.token_ids[:start] == plan.prompt_ids  # every call's prompt is a prefix, exactly
        assert segment.token_ids[start : start + len(sampled)] == sampled
        assert segment.loss_mask[start : start + len(sampled)] == [1] * len(sampled)
    assert segment.num_sampled == sum(len(s) for s in samples)
    paris = renderer.tokenizer.convert_tokens_to_ids(["Ġ", "Paris"])
    ids = segment.token_ids
    at = next(i for i in range(len(ids) - 1) if ids[i : i + 2] == paris)
    assert segment.loss_mask[at : at + 2] == [1, 1]  # kept as sampled, never re-tokenized to ĠParis


def test_render_policy_splits_with_the_reason(renderer: Renderer) -> None:
    plans, segments, _ = _drive(renderer, "render")
    assert len(segments) >= 2
    reasons: list[Any] = [s.break_reason for s in segments[1:]]
    assert all(r and "diverges" in r for r in reasons)
    assert plans[2].segment_break is not None
