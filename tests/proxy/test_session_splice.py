"""The splice planner (proxy/splice/plan.py) on its own (tiny model's template): splice reuses exact ids,
rewrites and branches start a new segment with a reason, and the tail is only the newly rendered messages."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from rollwire.compact_json import json_bytes
from rollwire.proxy.conversation import Conversation, Message
from rollwire.proxy.render import Renderer
from rollwire.proxy.splice.plan import PriorCall, encode_work, plan_prompt, whole_prompt
from rollwire.store.codec import decode_ids, encode_ids


@pytest.fixture(scope="module")
def renderer(tiny_model_dir: Path) -> Renderer:
    return Renderer.from_folder(tiny_model_dir)


def _prior(
    call_id: int,
    conv: Conversation,
    answer: Message,
    prompt: list[int],
    sampled: list[int],
    segment: int = 0,
    continued: bool = False,
) -> PriorCall:
    return PriorCall(
        call_id,
        tuple(m.key() for m in conv.messages),
        conv.tools_key(),
        answer.key(),
        prompt,
        sampled,
        segment,
        continued,
    )


def _setup(renderer: Renderer) -> tuple[Conversation, Message, PriorCall]:
    first = Conversation("m", (Message("user", "hi"),))
    plan = plan_prompt(first, [], renderer, "splice")
    assert plan.segment_index == 0 and plan.segment_break is None and plan.reused_prefix_len == 0
    answer = Message("assistant", "hello there")
    sampled = renderer.encode("hello there") + [min(renderer.end_ids)]
    return first, answer, _prior(1, first, answer, list(plan.prompt_ids), sampled)


def test_splice_is_prompt_plus_sampled_plus_tail(renderer: Renderer) -> None:
    first, answer, prior = _setup(renderer)
    nxt = Conversation("m", first.messages + (answer, Message("user", "more")))
    plan = plan_prompt(nxt, [prior], renderer, "splice")
    reused = [*prior.prompt_ids, *prior.sampled_ids]
    assert plan.prompt_ids[: len(reused)] == reused and plan.reused_prefix_len == len(reused)
    assert (
        renderer.decode(list(plan.prompt_ids[len(reused) :]))
        == "\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n"
    )
    assert plan.segment_index == 0 and plan.segment_break is None and plan.spliced_from == 1


def test_a_spliced_prompt_is_the_earlier_calls_bytes_plus_its_tail(renderer: Renderer) -> None:
    """A prior that carries its prompt as stored (``prompt_blob``) and as the upstream request wrote it
    (``prompt_json``) makes the splice's stored and sent prompt by appending its answer and the tail: the same
    bytes as encoding and writing the whole prompt; without them, the whole prompt is encoded and written."""
    first, answer, prior = _setup(renderer)
    nxt = Conversation("m", first.messages + (answer, Message("user", "more")))
    carried = replace(prior, prompt_blob=encode_ids(prior.prompt_ids), prompt_json=json_bytes(prior.prompt_ids))
    appended = plan_prompt(nxt, [carried], renderer, "splice")
    without = plan_prompt(nxt, [prior], renderer, "splice")
    assert appended.prompt_blob is not None and appended.prompt_json is not None
    assert without.prompt_blob is None and without.prompt_json is None
    assert appended.prompt_ids == without.prompt_ids
    assert appended.encoded_prompt() == without.encoded_prompt() == encode_ids(without.prompt_ids)
    assert appended.json_prompt() == without.json_prompt() == json_bytes(without.prompt_ids)
    assert decode_ids(appended.encoded_prompt()) == orjson.loads(appended.json_prompt()) == appended.prompt_ids


def test_a_length_cut_answer_gets_its_end_of_turn_in_the_tail(renderer: Renderer) -> None:
    first, answer, prior = _setup(renderer)
    cut = PriorCall(
        prior.call_id, prior.request_keys, prior.tools_key, prior.answer_key, prior.prompt_ids,
        prior.sampled_ids[:-1], 0, False,
    )  # fmt: skip
    plan = plan_prompt(Conversation("m", first.messages + (answer, Message("user", "x"))), [cut], renderer, "splice")
    assert renderer.decode(list(plan.prompt_ids[plan.reused_prefix_len :])).startswith("<|im_end|>\n<|im_start|>user")


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda a: (Message("user", "HI"), a, Message("user", "more")), "message 0"),
        (
            lambda a: (Message("user", "hi"), Message("assistant", "edited"), Message("user", "more")),
            "not call 1's answer",
        ),
    ],
)
def test_rewritten_history_starts_a_new_segment_with_the_reason(renderer: Renderer, edit: object, reason: str) -> None:
    _, answer, prior = _setup(renderer)
    plan = plan_prompt(Conversation("m", edit(answer)), [prior], renderer, "splice")  # type: ignore[operator]
    assert plan.segment_index == 1 and plan.segment_break is not None and reason in plan.segment_break
    assert plan.reused_prefix_len == 0


def test_tools_change_and_branches(renderer: Renderer) -> None:
    first, answer, prior = _setup(renderer)
    tools = ({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},)
    plan = plan_prompt(
        Conversation("m", first.messages + (answer, Message("user", "x")), tools), [prior], renderer, "splice"
    )
    assert plan.segment_break is not None and "tools changed" in plan.segment_break
    continued = PriorCall(
        prior.call_id, prior.request_keys, prior.tools_key, prior.answer_key, prior.prompt_ids, prior.sampled_ids,
        0, True,
    )  # fmt: skip
    branch = plan_prompt(
        Conversation("m", first.messages + (answer, Message("user", "y"))), [continued], renderer, "splice"
    )
    assert branch.segment_index == 1 and branch.segment_break is not None and "branches" in branch.segment_break
    assert branch.reused_prefix_len == len(prior.prompt_ids) + len(prior.sampled_ids)


def test_a_rendered_prompt_is_remembered_exactly_and_within_its_bound(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group's rollouts start from one prompt: its ids come from memory, equal to a fresh render + encode,
    without rendering again; the memory drops the least recently used prompts past its token bound."""
    from rollwire.proxy import render

    renderer = Renderer.from_folder(tiny_model_dir)
    renders: list[int] = []
    real_render = renderer.render

    def counted_render(
        messages: list[dict[str, Any]], tools: list[dict[str, Any]], add_generation_prompt: bool, **kwargs: Any
    ) -> str:
        renders.append(1)
        return real_render(messages, tools, add_generation_prompt, **kwargs)

    monkeypatch.setattr(renderer, "render", counted_render)
    convs = [Conversation("m", (Message("user", f"task {i}: copy {'x' * i}"),)) for i in range(4)]
    fresh = [renderer.encode(real_render([m.to_template() for m in c.messages], [], True)) for c in convs]
    monkeypatch.setattr(render, "RENDERED_CACHE_TOKENS", sum(len(ids) for ids in fresh[1:]))
    assert [whole_prompt(c, renderer, "") for c in convs] == fresh and len(renders) == 4
    assert whole_prompt(convs[3], renderer, "") == fresh[3] and len(renders) == 4  # remembered, not rendered
    assert len(renderer._rendered) == 3  # the first, least recently used, went over the bound
    assert renderer._rendered_tokens == sum(len(ids) for ids in fresh[1:])
    assert whole_prompt(convs[0], renderer, "") == fresh[0] and len(renders) == 5  # dropped: rendered again
    remembered = whole_prompt(convs[3], renderer, "")
    remembered.append(-1)  # a caller's list is its own: the remembered ids stay as they were
    assert whole_prompt(convs[3], renderer, "") == fresh[3]


def test_a_remembered_prompt_is_keyed_by_everything_its_text_depends_on(tiny_model_dir: Path) -> None:
    """Tools in another order, another reasoning switch or another prefill render other text: each is rendered
    (and remembered) on its own, never answered with another's ids."""
    renderer = Renderer.from_folder(tiny_model_dir)
    tool = {"type": "function", "function": {"name": "ls", "description": "list", "parameters": {"type": "object"}}}
    swapped = {"function": {"parameters": {"type": "object"}, "description": "list", "name": "ls"}, "type": "function"}
    base = Conversation("m", (Message("user", "hi"),), tools=(tool,))
    variants = [base, replace(base, tools=(swapped,)), replace(base, reasoning=False)]

    def fresh(conv: Conversation, prefill: str) -> list[int]:
        messages = [m.to_template() for m in conv.messages]
        return renderer.encode(renderer.render(messages, list(conv.tools), True, **conv.template_kwargs()) + prefill)

    for conv in variants:
        assert whole_prompt(conv, renderer, "") == fresh(conv, "")
    assert whole_prompt(base, renderer, "<tool_call>") == fresh(base, "<tool_call>")
    assert whole_prompt(variants[1], renderer, "") != whole_prompt(base, renderer, "")  # the key order shows
    assert len(renderer._rendered) == 4


def test_a_whole_prompt_already_remembered_is_no_work_to_plan(renderer: Renderer) -> None:
    """A group's rollouts start from one prompt: once its ids are remembered, planning it renders and encodes
    nothing, so it is planned in place rather than on a worker thread; other tools are another prompt."""
    system = Message("system", "Follow the repository's conventions. " * 100)
    conv = Conversation("m", (system, Message("user", "go")))
    other = replace(conv, tools=({"type": "function", "function": {"name": "ls", "parameters": {}}},))
    assert encode_work(conv, [], "splice", renderer, "") > 2048
    whole_prompt(conv, renderer, "")
    assert encode_work(conv, [], "splice", renderer, "") == 0
    assert encode_work(conv, [], "render", renderer, "") == 0
    assert encode_work(other, [], "splice", renderer, "") > 2048


def test_a_whole_prompt_carries_its_stored_ids_rendered_or_remembered(renderer: Renderer) -> None:
    """A call planned from a whole prompt carries the bytes the renderer keeps for it: the same bytes as encoding
    its ids, whether the prompt was just rendered or remembered, and whichever call it continues."""
    conv = Conversation("m", (Message("system", "Be exact. " * 40), Message("user", "list the files")))
    first = plan_prompt(conv, [], renderer, "splice")
    again = plan_prompt(conv, [], renderer, "splice")  # remembered now
    assert first.prompt_blob is not None and again.prompt_blob is not None
    assert first.prompt_blob == again.prompt_blob == encode_ids(first.prompt_ids)
    assert again.prompt_ids == first.prompt_ids
    answer = Message("assistant", "ok")
    prior = _prior(1, conv, answer, list(first.prompt_ids[:-3]), [])  # a prefix of the prompt: continued by a re-render
    rerendered = plan_prompt(conv, [prior], renderer, "render")
    assert rerendered.spliced_from == 1 and rerendered.encoded_prompt() == encode_ids(rerendered.prompt_ids)
