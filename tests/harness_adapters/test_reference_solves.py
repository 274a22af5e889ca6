"""Must-show 2: the reference agent solves a tiny-suite task when its model calls go through the real proxy to a
scripted policy behind an OpenAI-compatible completions upstream (the demo's teacher: the task's reference
solution as token ids of the tiny tokenizer, with logprobs). The checker gives 1.0, and the rollout's
trajectory, rebuilt from the store by ``rollwire.reconstruct``, holds exactly what the upstream was sent
(mask 0) and what it returned (mask 1), call after call."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollwire.mcp_servers.tasks.loader import load_suite
from rollwire.reconstruct import reconstruct
from rollwire.store.db import open_engine
from tests.harness_adapters.conftest import run_one_task, scripted_policy_stack

pytestmark = pytest.mark.slow


def test_reference_agent_solves_a_task_through_the_proxy(tiny_model_dir: Path, tmp_path: Path) -> None:
    with scripted_policy_stack(tiny_model_dir, tmp_path, [load_suite("tiny")]) as (tap, info):
        row = run_one_task(
            info, "reference", tmp_path / "ws", deadline_s=60, task="write-dog",
            model=info.model, max_turns=4, max_tokens=128, temperature=0.0,
        )  # fmt: skip
    assert info.model == "scripted-policy"
    assert row.status == "finished" and row.exit_code == 0, (row.error, row.log_tail)
    assert row.reward == 1.0, row.reward_breakdown
    assert (tmp_path / "state" / row.id / "workspace" / "answer.txt").read_text() == "dog"

    trajectory = reconstruct(open_engine(info.db_url), row.id)
    assert len(tap.calls) == 2  # the tool call, then the answer after the tool's result
    assert [len(s.call_ids) for s in trajectory.segments] == [2]  # the second call extends the first
    (segment,) = trajectory.segments
    at = 0
    for request, answer in tap.calls:
        prompt, (choice,) = request["prompt"], answer["choices"]
        sampled = choice["token_ids"]
        assert segment.token_ids[: len(prompt)] == prompt  # everything the upstream was sent, in order
        assert segment.loss_mask[at : len(prompt)] == [0] * (len(prompt) - at)
        end = len(prompt) + len(sampled)
        assert segment.token_ids[len(prompt) : end] == sampled  # exactly the ids it returned ...
        assert segment.loss_mask[len(prompt) : end] == [1] * len(sampled)  # ... and only those trained on
        assert segment.logprobs[len(prompt) : end] == choice["logprobs"]["token_logprobs"]
        at = end
    assert at == len(segment.token_ids)
