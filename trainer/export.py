"""Recorded trajectories as training files for other trainers: JSONL or Parquet, in four flavours.

Every flavour carries the recorded token ids as they are (never a decode to be templated again).

- ``sft``: one row per segment, exact ids: ``input_ids``, ``labels`` (-100 where the model did not
  sample), ``loss_mask``, ``logprobs``, ``policy_versions`` and the rollout's ids and reward.
- ``trl``: TRL's pre-tokenized form (checked against trl 1.16): ``input_ids``, ``assistant_masks`` and
  ``labels`` (-100 where the mask is 0). Its SFTTrainer takes a dataset with ``input_ids`` as already
  processed and leaves a ``labels`` column as is (also under ``skip_prepare_dataset``); its collator pads
  ``labels``, so the loss lands on sampled tokens only.
- ``verl``: one row per segment in the fields of verl's multi-turn agent loop output (``AgentLoopOutput``
  in ``verl/experimental/agent_loop/agent_loop.py``, checked against verl 0.8.0.dev): ``prompt_ids``,
  ``response_ids`` (sampled tokens and, mask 0, the tool results between them, as verl lays out a
  multi-turn response), ``response_mask``, ``response_logprobs`` (the behaviour logprobs verl reads as
  ``rollout_log_probs``), ``reward_score``, ``num_turns``; plus ``data_source`` and ``extra_info``
  (with the ``index`` verl's datasets key rows by, and the rollout's ids).
- ``rollwire``: one trajectory per line, everything recorded (``Trajectory.to_dict``): the open format
  ``Trajectory.from_dict`` reads back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.trajectory import Segment, Trajectory

FLAVORS = ("sft", "verl", "trl", "rollwire")
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


def _verl_row(t: Trajectory, index: int, s: Segment, row_index: int) -> dict[str, Any]:
    cut = _first_sampled(s)
    return {
        "data_source": f"rollwire/{t.run_id}",
        "prompt_ids": s.token_ids[:cut],
        "response_ids": s.token_ids[cut:],
        "response_mask": s.loss_mask[cut:],
        "response_logprobs": s.logprobs[cut:],
        "reward_score": float(t.reward) if t.reward is not None else None,
        "num_turns": max(len(s.call_ids), 1),
        "extra_info": {
            "index": row_index,
            "rollout_id": t.rollout_id,
            "run_id": t.run_id,
            "task_id": t.task_id or "",
            "group_id": t.group_id or "",
            "segment": index,
            "line": s.line,
            "policy_versions": s.policy_versions[cut:],
        },
    }


def export_rows(
    trajectories: Iterable[Trajectory], flavor: str, *, tokenizer: Any = None, min_reward: float | None = None
) -> list[dict[str, Any]]:
    """One row per segment holding sampled tokens (``rollwire``: per trajectory), of rollouts that pass ``min_reward``.

    ``tokenizer`` is accepted for older callers; no flavour decodes ids any more.
    """
    if flavor not in FLAVORS:
        raise InvalidRequest(f"unknown export flavor {flavor!r} ({', '.join(FLAVORS)})", param="flavor")
    rows: list[dict[str, Any]] = []
    for t in trajectories:
        if min_reward is not None and (t.reward is None or t.reward < min_reward):
            continue
        if flavor == "rollwire":
            rows.append(t.to_dict())
            continue
        for index, s in enumerate(t.segments):
            if not any(s.loss_mask):
                continue
            if flavor == "sft":
                rows.append(_sft_row(t, index, s))
            elif flavor == "trl":
                labels = [tok if m else -100 for tok, m in zip(s.token_ids, s.loss_mask)]
                rows.append({"input_ids": s.token_ids, "assistant_masks": s.loss_mask, "labels": labels})
            else:
                rows.append(_verl_row(t, index, s, len(rows)))
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
