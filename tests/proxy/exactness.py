"""The exactness check every token test makes: a rollout's trajectory, read back from the store, against what the
engine was shown and sampled (its calls as an ``EngineTap`` saw them)."""

from __future__ import annotations

from typing import Any

import pytest

from rollwire.trajectory import Trajectory


def assert_segments_exact(trajectory: Trajectory, seen: list[tuple[dict[str, Any], dict[str, Any]]], calls: int) -> None:
    """Every segment's prompt tokens are exactly what the engine was shown, its sampled tokens exactly what it
    sampled (with its logprobs, under the loss mask), one recorded call per engine call."""
    assert sum(len(s.call_ids) for s in trajectory.segments) == len(seen) == calls
    index = 0
    for segment in trajectory.segments:
        mask: list[int] = []
        logprobs: list[float] = []
        for _ in segment.call_ids:
            request, answer = seen[index]
            index += 1
            prompt, sampled = request["prompt"], answer["choices"][0]["token_ids"]
            assert answer["choices"][0]["prompt_token_ids"] == prompt
            # the engine's prompt is everything of the segment so far, unchanged
            assert segment.token_ids[: len(prompt)] == prompt
            assert segment.token_ids[len(prompt) : len(prompt) + len(sampled)] == sampled
            fresh = len(prompt) - len(mask)
            mask += [0] * fresh + [1] * len(sampled)
            logprobs += [0.0] * fresh + [float(x) for x in answer["choices"][0]["logprobs"]["token_logprobs"]]
        assert len(segment.token_ids) == len(mask)
        assert segment.loss_mask == mask
        assert segment.logprobs == pytest.approx(logprobs, abs=1e-6)  # stored as float32
        assert all((v >= 0) == (m == 1) for v, m in zip(segment.policy_versions, segment.loss_mask, strict=True))


__all__ = ["assert_segments_exact"]
