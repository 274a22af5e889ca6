"""Checkpoints as Hugging Face folders (safetensors) plus the trainer's cursor, buffer and optimizer.

A checkpoint is written into a hidden staging folder and renamed into place, then ``latest`` is
replaced atomically; a trainer killed at any point finds either the previous checkpoint or the new
one, whole. The saved cursor and pending buffer together say exactly which trajectories are
already in the weights, so a resumed trainer trains on none of them again.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from rollwire.errors import NotFound

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"
LATEST = "latest"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "vocab.json", "merges.txt", "generation_config.json")


@dataclass(slots=True)
class TrainerState:
    step: int = 0
    cursor: int = 0
    """Stream cursor of the last trajectory the trainer had taken in when this checkpoint was written."""
    policy_version: int = 0
    pending: list[dict[str, Any]] = field(default_factory=list)
    """Trajectories taken in but not yet trained on (groups still filling)."""
    trained_rollouts: list[str] = field(default_factory=list)
    """Every rollout id a step has consumed (trained on, or left out by a reward/variance/lag filter), in order."""


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def save_checkpoint(
    root: Path,
    state: TrainerState,
    weights: dict[str, torch.Tensor],
    model: torch.nn.Module,
    optimizer_state: dict[str, Any] | None,
    tokenizer_dir: Path | None,
    keep: int = 2,
    extra: Callable[[Path], None] | None = None,
) -> Path:
    """Write ``root/step-NNNNNN`` atomically, point ``latest`` at it and prune all but the last ``keep``;
    ``extra`` writes more into the staging folder (a LoRA run's adapter)."""
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"step-{state.step:06d}"
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    try:
        # a Hugging Face model's method: torch types every attribute a Module lacks as Tensor | Module
        model.save_pretrained(str(staging), state_dict=weights, safe_serialization=True)  # type: ignore[operator]
        if tokenizer_dir is not None:
            for name in TOKENIZER_FILES:
                if (tokenizer_dir / name).is_file() and not (staging / name).exists():
                    shutil.copy2(tokenizer_dir / name, staging / name)
        if optimizer_state is not None:
            torch.save(optimizer_state, staging / OPTIMIZER_FILE)
        if extra is not None:
            extra(staging)
        (staging / STATE_FILE).write_text(json.dumps(asdict(state)))
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _write_atomic(root / LATEST, target.name)
    for old in sorted(p for p in root.glob("step-*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def latest_checkpoint(root: Path) -> Path | None:
    """The folder ``latest`` names, or None when this output folder holds no checkpoint yet."""
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    folder = root / pointer.read_text().strip()
    if not (folder / STATE_FILE).is_file():
        raise NotFound(f"checkpoint pointer {pointer} names {folder}, which is incomplete")
    return folder


def checkpoint_of_version(root: Path, version: int) -> Path:
    """The checkpoint folder under ``root`` whose weights are policy version ``version`` (a ``NotFound`` that lists
    the versions ``root`` holds where none is)."""
    found: dict[int, Path] = {}
    for folder in sorted(p for p in Path(root).glob("step-*") if (p / STATE_FILE).is_file()):
        found[load_state(folder).policy_version] = folder
    if version not in found:
        held = ", ".join(map(str, sorted(found))) or "none"
        raise NotFound(f"no checkpoint of policy version {version} in {root} (versions held: {held})")
    return found[version]


def load_state(folder: Path) -> TrainerState:
    data = json.loads((folder / STATE_FILE).read_text())
    return TrainerState(**data)


def load_optimizer_state(folder: Path) -> dict[str, Any] | None:
    path = folder / OPTIMIZER_FILE
    return torch.load(path, map_location="cpu", weights_only=True) if path.is_file() else None


__all__ = ["TrainerState", "checkpoint_of_version", "latest_checkpoint", "load_optimizer_state", "load_state", "save_checkpoint"]
