"""Recorded trajectories as training files for other trainers: JSONL or Parquet, in three flavours.

- ``sft``: one row per segment, exact ids: ``input_ids``, ``labels`` (-100 where the model did not
  sample), ``loss_mask``, ``logprobs``, ``policy_versions`` and the rollout's ids and reward.
- ``trl``: TRL's pre-tokenized SFT form, ``input_ids`` + ``assistant_masks`` (TRL computes the loss only
  where the mask is 1, i.e. on sampled tokens).
- ``verl``: verl's RL-dataset columns (``data_source``, ``prompt`` messages, ``ability``,
  ``reward_model``, ``extra_info``); the prompt text is a decode of the exact prompt ids, which ride
  along in ``extra_info`` with the response ids, mask and behaviour logprobs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.trajectory import Segment, Trajectory

FLAVORS = ("sft", "verl", "trl")
FORMATS = ("jsonl", "parquet")


def _first_sampled(segment: Segment) -> int:
    return next((i for i, m in enumerate(segment.loss_mask) if m), len(segment.token_ids))


def _sft_row(t: Trajectory, index: int, s: Segment) -> dict[str, Any]:
    return {
        "rollout_id": t.rollout_id,
        "run_id": t.run_id,
        "task_id": t.task_id,
        "group_id": t.group_id,
        "reward": t.reward,
        "segment": index,
        "line": s.line,
        "input_ids": s.token_ids,
        "labels": [tok if m else -100 for tok, m in zip(s.token_ids, s.loss_mask)],
        "loss_mask": s.loss_mask,
        "logprobs": s.logprobs,
        "policy_versions": s.policy_versions,
    }


def _verl_row(t: Trajectory, index: int, s: Segment, tokenizer: Any) -> dict[str, Any]:
    cut = _first_sampled(s)
    return {
        "data_source": f"rollwire/{t.run_id}",
        "prompt": [{"role": "user", "content": tokenizer.decode(s.token_ids[:cut])}],
        "ability": "agent",
        "reward_model": {"style": "rule", "ground_truth": json.dumps(t.reward)},
        "extra_info": {
            "rollout_id": t.rollout_id,
            "task_id": t.task_id or "",
            "group_id": t.group_id or "",
            "segment": index,
            "line": s.line,
            "reward": float(t.reward) if t.reward is not None else None,
            "prompt_ids": s.token_ids[:cut],
            "response_ids": s.token_ids[cut:],
            "response_mask": s.loss_mask[cut:],
            "response_logprobs": s.logprobs[cut:],
        },
    }


def export_rows(
    trajectories: Iterable[Trajectory], flavor: str, *, tokenizer: Any = None, min_reward: float | None = None
) -> list[dict[str, Any]]:
    """One row per segment holding sampled tokens, of rollouts that pass ``min_reward``."""
    if flavor not in FLAVORS:
        raise InvalidRequest(f"unknown export flavor {flavor!r} ({', '.join(FLAVORS)})", param="flavor")
    if flavor == "verl" and tokenizer is None:
        raise InvalidRequest("the verl flavor needs a tokenizer to decode prompts", param="tokenizer")
    rows = []
    for t in trajectories:
        if min_reward is not None and (t.reward is None or t.reward < min_reward):
            continue
        for index, s in enumerate(t.segments):
            if not any(s.loss_mask):
                continue
            if flavor == "sft":
                rows.append(_sft_row(t, index, s))
            elif flavor == "trl":
                rows.append({"input_ids": s.token_ids, "assistant_masks": s.loss_mask})
            else:
                rows.append(_verl_row(t, index, s, tokenizer))
    return rows


def write_rows(rows: list[dict[str, Any]], path: Path, fmt: str) -> None:
    """Write atomically-enough for a one-shot export: to ``path.partial``, then rename."""
    if fmt not in FORMATS:
        raise InvalidRequest(f"unknown export format {fmt!r} ({', '.join(FORMATS)})", param="format")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    if fmt == "jsonl":
        with partial.open("w") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), partial)
    partial.replace(path)


__all__ = ["FLAVORS", "FORMATS", "export_rows", "write_rows"]
