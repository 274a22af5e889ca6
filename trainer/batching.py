"""From trajectories to tensors: task groups, samples, sequence packing and micro-batches.

Packing puts several sequences in one row with position ids that restart at 0 for each; with no
attention mask, transformers reads those resets as sequence boundaries and keeps the sequences
from attending to each other (tested against the unpacked forward). Targets are shifted inside
each sequence, so a sequence's last token never predicts the next sequence's first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rollwire.errors import InvalidRequest
from rollwire.side_calls import is_side_call
from rollwire.trajectory import Trajectory


@dataclass(frozen=True, slots=True)
class Sample:
    """One segment to learn from: its tokens, loss mask, behaviour logprobs and advantage."""

    token_ids: list[int]
    loss_mask: list[int]
    behaviour_logprobs: list[float]
    policy_versions: list[int]
    advantage: float
    rollout_id: str
    reward: float
    temperature: list[float] = field(default_factory=list)
    """Per-token sampling temperature (empty: 1.0), see Segment.temperature."""
    top_p: list[float] = field(default_factory=list)
    proximal_logprobs: list[float] = field(default_factory=list)
    """The trainer's own logprobs before a batch's first pass (empty: none), see ``with_proximal_logprobs``."""
    stale: list[int] = field(default_factory=list)
    """1 on each token a policy older than the trainer's sampled (empty: none), see ``losses.anchored``."""

    @property
    def num_loss_tokens(self) -> int:
        """Sampled tokens that can be predicted (the first token of a sequence has no context)."""
        return sum(self.loss_mask[1:])


@dataclass(frozen=True, slots=True)
class MicroBatch:
    """Tensors of one forward/backward pass, all [rows, length] and aligned to the targets."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    """Padded rows: which positions are real. Packed rows: None (the position-id resets separate the sequences),
    or a [rows, 1, L, L] boolean mask where units share a trunk (``shared_prefix_units``)."""
    targets: torch.Tensor
    loss_mask: torch.Tensor
    behaviour_logprobs: torch.Tensor
    advantages: torch.Tensor
    token_weights: torch.Tensor
    """Each loss token's share of the step's loss (aggregation over the whole global batch)."""
    sequence_ids: torch.Tensor
    """Index into the step's sample list for every position; -1 on padding."""
    num_tokens: int
    temperature: torch.Tensor | None = None
    """Sampling temperature of each target (None: all 1.0): logprobs are recomputed from logits / T."""
    top_p: torch.Tensor | None = None
    """Nucleus of each target's sampling (None: all 1.0)."""
    proximal_logprobs: torch.Tensor | None = None
    """The trainer's logprobs before the batch's first pass (None: not taken), the PPO anchor with a correction on."""
    stale: torch.Tensor | None = None
    """True on targets an older policy than the trainer's sampled (None: no such target)."""

    def to(self, device: torch.device) -> MicroBatch:
        moved: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            moved[name] = value.to(device) if isinstance(value, torch.Tensor) else value
        return MicroBatch(**moved)


def group_key(trajectory: Trajectory) -> str:
    """Rollouts compared with each other: the group id, else the task id, else the rollout itself."""
    return trajectory.group_id or trajectory.task_id or trajectory.rollout_id


def samples_from(
    trajectory: Trajectory,
    advantage: float,
    *,
    reward: float | None = None,
    tempered: bool = True,
    main_only: bool = False,
    current_version: int | None = None,
) -> list[Sample]:
    """One sample per segment that holds sampled tokens; the trajectory's advantage on each.

    ``tempered`` keeps each token's sampling temperature / top_p, so the trainer recomputes the engine's
    processed logprobs; without it (SFT, or an engine that reports raw logprobs) logprobs are the model's own.
    ``main_only`` leaves out the harness's side calls (titles, compaction summaries: ``Segment.line``); the main
    agent's and its sub-agents' turns stay. ``current_version``: the trainer's policy version, which marks the
    tokens an older one sampled (``Sample.stale``).
    """
    reward = float(reward if reward is not None else trajectory.reward or 0.0)
    out = []
    for segment in trajectory.segments:
        if sum(segment.loss_mask[1:]) == 0 or (main_only and is_side_call(segment.line)):
            continue
        out.append(
            Sample(
                token_ids=list(segment.token_ids),
                loss_mask=list(segment.loss_mask),
                behaviour_logprobs=list(segment.logprobs),
                policy_versions=list(segment.policy_versions),
                advantage=advantage,
                rollout_id=trajectory.rollout_id,
                reward=reward,
                temperature=list(segment.temperature) if tempered else [],
                top_p=list(segment.top_p) if tempered else [],
                stale=_older(segment.policy_versions, current_version),
            )
        )
    return out


def _older(versions: Sequence[int], current: int | None) -> list[int]:
    """1 where a sampled token's version is below ``current``; empty where none is (prompt tokens carry -1)."""
    if current is None or not any(0 <= v < current for v in versions):
        return []
    return [int(0 <= v < current) for v in versions]


@dataclass(slots=True)
class GroupBuffer:
    """Trajectories waiting for their group to fill; a full group is handed out once, in arrival order."""

    group_size: int
    pending: dict[str, list[Trajectory]] = field(default_factory=dict)

    def add(self, trajectory: Trajectory) -> None:
        self.pending.setdefault(group_key(trajectory), []).append(trajectory)

    def ready(self) -> list[str]:
        return [key for key, members in self.pending.items() if len(members) >= self.group_size]

    def pop_groups(self, count: int) -> list[list[Trajectory]]:
        keys = self.ready()[:count]
        return [self.pending.pop(key) for key in keys]

    def pop_all(self, count: int) -> list[Trajectory]:
        """Up to ``count`` trajectories regardless of group (SFT has no groups)."""
        out: list[Trajectory] = []
        for key in list(self.pending):
            members = self.pending[key]
            take, keep = members[: count - len(out)], members[count - len(out) :]
            out.extend(take)
            if keep:
                self.pending[key] = keep
            else:
                del self.pending[key]
            if len(out) >= count:
                break
        return out

    def size(self) -> int:
        return sum(len(members) for members in self.pending.values())

    def snapshot(self) -> list[dict[str, Any]]:
        return [t.to_dict() for members in self.pending.values() for t in members]

    @classmethod
    def restore(cls, group_size: int, items: Iterable[dict[str, Any]]) -> GroupBuffer:
        buffer = cls(group_size)
        for item in items:
            buffer.add(Trajectory.from_dict(item))
        return buffer


AGGREGATIONS = ("token-mean", "sequence-mean", "constant")


def token_weights(samples: Sequence[Sample], aggregation: str, *, normaliser: int | None = None) -> list[float]:
    """Per-sample weight of each loss token so that the summed loss is the chosen mean over the global batch.

    ``token-mean``: every loss token of the batch counts the same. ``sequence-mean``: every rollout counts
    the same, however many segments it was recorded as; its loss tokens (over all its segments) share its
    weight. ``constant`` (Dr.GRPO, Liu et al. 2025): every token weighs 1 / (rollouts x ``normaliser``),
    a constant budget of tokens per rollout, so a long answer is not down-weighted per token.
    """
    if aggregation == "token-mean":
        total = sum(s.num_loss_tokens for s in samples)
        return [1.0 / total if total else 0.0 for _ in samples]
    per_rollout: dict[str, int] = {}
    for s in samples:
        per_rollout[s.rollout_id] = per_rollout.get(s.rollout_id, 0) + s.num_loss_tokens
    n = len(per_rollout)
    if aggregation == "sequence-mean":
        return [1.0 / (per_rollout[s.rollout_id] * n) if s.num_loss_tokens else 0.0 for s in samples]
    if aggregation == "constant":
        if not normaliser or normaliser <= 0:
            raise InvalidRequest("the constant aggregation needs a positive token normaliser", param="normaliser")
        return [1.0 / (n * normaliser) for _ in samples]
    raise InvalidRequest(f"unknown aggregation {aggregation!r} ({', '.join(AGGREGATIONS)})", param="aggregation")


def pack(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """First-fit-decreasing bins of sample indices whose lengths sum to at most ``capacity``.

    A sample longer than ``capacity`` gets a bin of its own (it is never cut).
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        for b, free in enumerate(room):
            if lengths[i] <= free:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(capacity - lengths[i])
    return bins


def pad_groups(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Unpacked micro-batches: samples of similar length whose padded size (rows x longest) fits ``capacity``."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    for i in order:
        if groups and lengths[groups[-1][0]] * (len(groups[-1]) + 1) <= capacity:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


@dataclass(frozen=True, slots=True)
class Unit:
    """What one stretch of a packed row holds: samples that share their first ``trunk`` tokens, laid out as the
    trunk once, then each sample's rest (a branch, attending to the trunk and to itself only). ``trunk`` 0: one
    sample, laid out whole."""

    trunk: int
    samples: tuple[int, ...]

    def length(self, lengths: Sequence[int]) -> int:
        return self.trunk + sum(lengths[i] - self.trunk for i in self.samples)


def _first_sampled(sample: Sample) -> int:
    return next((i for i, m in enumerate(sample.loss_mask) if m), len(sample.loss_mask))


def shared_prefix_units(samples: Sequence[Sample], capacity: int) -> list[Unit]:
    """Samples whose tokens agree up to their first sampled token (a GRPO group's prompt) as shared-trunk units.

    The trunk is that prompt but its last token: each branch repeats it at its position, so that position predicts
    the branch's own first sampled token. A trunk's positions carry no loss, and a branch sees exactly the tokens
    and positions it would alone, so every logprob is the one its own sequence gives; the trunk is forwarded once
    instead of once per sample. Branches are split over several units (the trunk repeated) to keep each within
    ``capacity`` tokens; a sample that shares nothing is a unit of its own.
    """
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(samples):
        by_prompt.setdefault(tuple(s.token_ids[: _first_sampled(s)]), []).append(i)
    units: list[Unit] = []
    for prompt, members in by_prompt.items():
        trunk = len(prompt) - 1
        if len(members) < 2 or trunk < 1:
            units += [Unit(0, (i,)) for i in members]
            continue
        branch: list[int] = []
        size = trunk
        for i in members:
            rest = len(samples[i].token_ids) - trunk
            if branch and size + rest > capacity:
                units.append(Unit(trunk, tuple(branch)) if len(branch) > 1 else Unit(0, (branch[0],)))
                branch, size = [], trunk
            branch.append(i)
            size += rest
        units.append(Unit(trunk, tuple(branch)) if len(branch) > 1 else Unit(0, (branch[0],)))
    return units


def _row_arrays(samples: Sequence[Sample], units: Sequence[Unit], weights: Sequence[float]) -> dict[str, list[Any]]:
    keys = ("ids", "pos", "tgt", "mask", "old", "prox", "stale", "adv", "w", "seq", "temp", "topp", "trunk", "branch")
    row: dict[str, list[Any]] = {k: [] for k in keys}
    for unit in units:
        trunk_id = len(row["trunk"]) and row["trunk"][-1] + 1
        if unit.trunk:  # the shared tokens: no loss, no sample's advantage
            s, k = samples[unit.samples[0]], unit.trunk
            row["ids"] += s.token_ids[:k]
            row["pos"] += list(range(k))
            row["tgt"] += s.token_ids[1 : k + 1]
            row["temp"] += s.temperature[1 : k + 1] if s.temperature else [1.0] * k
            row["topp"] += s.top_p[1 : k + 1] if s.top_p else [1.0] * k
            for key, fill in (("mask", 0), ("old", 0.0), ("prox", 0.0), ("stale", 0), ("adv", 0.0), ("w", 0.0)):
                row[key] += [fill] * k
            row["seq"] += [-1] * k
            row["trunk"] += [trunk_id] * k
            row["branch"] += [-1] * k
        for i in unit.samples:
            s, k = samples[i], unit.trunk
            n = len(s.token_ids) - k
            row["temp"] += (s.temperature[k + 1 :] if s.temperature else [1.0] * (n - 1)) + [1.0]
            row["topp"] += (s.top_p[k + 1 :] if s.top_p else [1.0] * (n - 1)) + [1.0]
            row["ids"] += s.token_ids[k:]
            row["pos"] += list(range(k, k + n))
            row["tgt"] += s.token_ids[k + 1 :] + [0]
            row["mask"] += s.loss_mask[k + 1 :] + [0]
            row["old"] += s.behaviour_logprobs[k + 1 :] + [0.0]
            row["prox"] += (s.proximal_logprobs[k + 1 :] if s.proximal_logprobs else [0.0] * (n - 1)) + [0.0]
            row["stale"] += (s.stale[k + 1 :] if s.stale else [0] * (n - 1)) + [0]
            row["adv"] += [s.advantage] * n
            row["w"] += [weights[i]] * n
            row["seq"] += [i] * n
            row["trunk"] += [trunk_id] * n
            row["branch"] += [i] * n
    return row


def _shared_attention(trunks: torch.Tensor, branches: torch.Tensor) -> torch.Tensor:
    """[rows, 1, L, L] boolean mask: a position sees earlier positions of its own trunk, and of its own branch."""
    length = trunks.shape[1]
    earlier = torch.ones(length, length, dtype=torch.bool).tril()
    same_trunk = trunks.unsqueeze(2) == trunks.unsqueeze(1)
    visible = (branches.unsqueeze(1) == -1) | (branches.unsqueeze(2) == branches.unsqueeze(1))
    return (same_trunk & visible & earlier).unsqueeze(1)


def collate(
    samples: Sequence[Sample], rows: Sequence[Sequence[int]], weights: Sequence[float], *, packed: bool, pad_id: int
) -> MicroBatch:
    """Rows of sample indices -> one right-padded MicroBatch."""
    return collate_units(samples, [[Unit(0, (i,)) for i in r] for r in rows], weights, packed=packed, pad_id=pad_id)


def collate_units(
    samples: Sequence[Sample], rows: Sequence[Sequence[Unit]], weights: Sequence[float], *, packed: bool, pad_id: int
) -> MicroBatch:
    """Rows of units -> one right-padded MicroBatch (with a shared-trunk attention mask where a unit shares one)."""
    arrays = [_row_arrays(samples, r, weights) for r in rows]
    width = max(len(a["ids"]) for a in arrays)
    fill = {"ids": pad_id, "tgt": 0, "mask": 0, "old": 0.0, "prox": 0.0, "stale": 0, "adv": 0.0, "w": 0.0, "seq": -1,
            "temp": 1.0, "topp": 1.0, "branch": -1}  # fmt: skip
    cols: dict[str, list[list[Any]]] = {k: [] for k in (*fill, "pos", "attn", "trunk")}
    for a in arrays:
        extra = width - len(a["ids"])
        for key, value in fill.items():
            cols[key].append(a[key] + [value] * extra)
        # padding continues as its own sequence (positions restart at 0), so it never joins a real one
        cols["pos"].append(a["pos"] + list(range(extra)))
        cols["attn"].append([1] * len(a["ids"]) + [0] * extra)
        cols["trunk"].append(a["trunk"] + [(a["trunk"][-1] + 1) if a["trunk"] else 0] * extra)
    mask = torch.tensor(cols["mask"], dtype=torch.float32)
    indices = [i for r in rows for unit in r for i in unit.samples]
    plain = all(samples[i].temperature == [] and samples[i].top_p == [] for i in indices)
    proximal = all(samples[i].proximal_logprobs for i in indices)
    stale = any(samples[i].stale for i in indices)
    if not packed:
        attention: torch.Tensor | None = torch.tensor(cols["attn"], dtype=torch.long)
    elif any(unit.trunk for r in rows for unit in r):
        attention = _shared_attention(torch.tensor(cols["trunk"]), torch.tensor(cols["branch"]))
    else:
        attention = None
    return MicroBatch(
        input_ids=torch.tensor(cols["ids"], dtype=torch.long),
        position_ids=torch.tensor(cols["pos"], dtype=torch.long),
        attention_mask=attention,
        targets=torch.tensor(cols["tgt"], dtype=torch.long),
        loss_mask=mask,
        behaviour_logprobs=torch.tensor(cols["old"], dtype=torch.float32),
        advantages=torch.tensor(cols["adv"], dtype=torch.float32),
        token_weights=torch.tensor(cols["w"], dtype=torch.float32) * mask,
        sequence_ids=torch.tensor(cols["seq"], dtype=torch.long),
        num_tokens=sum(len(a["ids"]) for a in arrays),
        temperature=None if plain else torch.tensor(cols["temp"], dtype=torch.float32),
        top_p=None if plain else torch.tensor(cols["topp"], dtype=torch.float32),
        proximal_logprobs=torch.tensor(cols["prox"], dtype=torch.float32) if proximal else None,
        stale=torch.tensor(cols["stale"], dtype=torch.bool) if stale else None,
    )


def micro_batches(
    samples: Sequence[Sample],
    weights: Sequence[float],
    *,
    capacity: int,
    packed: bool,
    pad_id: int,
    share_prefixes: bool = True,
) -> list[MicroBatch]:
    """The micro-batches of one step, each within ``capacity`` tokens (a longer sequence gets one of its own).

    Packed: units (``shared_prefix_units``: a group's prompt forwarded once, with ``share_prefixes``) first-fit
    into rows as long as the step's longest unit, rows grouped into micro-batches. Padded: one sequence per row,
    similar lengths together.
    """
    if not samples:
        return []
    lengths = [len(s.token_ids) for s in samples]
    if packed:
        # rows no longer than the longest unit: attention cost stays that of the padded layout
        # (a dense mask does not skip the blocks between packed sequences) while padding disappears
        units = (
            shared_prefix_units(samples, capacity) if share_prefixes else [Unit(0, (i,)) for i in range(len(samples))]
        )
        sizes = [unit.length(lengths) for unit in units]
        row = max(sizes)
        rows = [[units[u] for u in bin_] for bin_ in pack(sizes, row)]
        per_batch = max(1, capacity // row)
        return [
            collate_units(samples, rows[i : i + per_batch], weights, packed=True, pad_id=pad_id)
            for i in range(0, len(rows), per_batch)
        ]
    return [
        collate(samples, [[i] for i in g], weights, packed=False, pad_id=pad_id) for g in pad_groups(lengths, capacity)
    ]


__all__ = [
    "AGGREGATIONS",
    "GroupBuffer",
    "MicroBatch",
    "Sample",
    "Unit",
    "collate",
    "collate_units",
    "group_key",
    "micro_batches",
    "pack",
    "pad_groups",
    "samples_from",
    "shared_prefix_units",
    "token_weights",
]
