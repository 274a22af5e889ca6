"""`rollwire train --tracker NAME` logs every step's metrics to TensorBoard, W&B (offline), MLflow or trackio; each
run is read back with the tool's own reader (TensorBoard's EventAccumulator, W&B's record protos from its offline
run file, MLflow's client, trackio's storage) and shows the reward and loss curves the trainer wrote."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from rollwire.app.cli.__main__ import main
from rollwire.trajectory import Trajectory

CURVES = ("reward_mean", "loss")


def read_tensorboard(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {key: [(e.step, e.value) for e in events.Scalars(key)] for key in CURVES}


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a W&B run file: its LevelDB-log framing (7-byte file header, 32 KiB blocks, chunk headers of
    checksum, length and type); wandb 0.31 ships the record protos but no Python reader for the file."""
    block, data = 32768, path.read_bytes()
    assert data[:4] == b":W&B"
    pos, records, pending = 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # too little room left in the block for a header: zero padding
            pos += block - pos % block
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
    return records


def read_wandb(folder: Path) -> dict[str, list[tuple[int, float]]]:
    # wandb's generated protobuf module builds its message classes at import: its types do not declare them
    from wandb.proto.wandb_internal_pb2 import Record  # type: ignore[attr-defined]

    (run_file,) = folder.glob("wandb/offline-run-*/run-*.wandb")
    curves: dict[str, list[tuple[int, float]]] = {key: [] for key in CURVES}
    for raw in _wandb_records(run_file):
        record = Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") != "history":
            continue
        items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        for key in CURVES:
            if key in items:
                curves[key].append((items["_step"], items[key]))
    return curves


def read_mlflow(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("rollwire")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["algo"] == "grpo"
    return {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)] for key in CURVES}


def read_trackio(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from trackio.sqlite_storage import SQLiteStorage

    assert SQLiteStorage.get_project_db_path("rollwire").parent == folder  # the run was written where asked
    logs = SQLiteStorage.get_logs("rollwire", "run")
    return {key: [(row["step"], row[key]) for row in logs if key in row] for key in CURVES}


READERS: dict[str, Callable[[Path], dict[str, list[tuple[int, float]]]]] = {
    "tensorboard": read_tensorboard,
    "wandb": read_wandb,
    "mlflow": read_mlflow,
    "trackio": read_trackio,
}


@pytest.mark.parametrize("tracker", list(READERS))
def test_train_logs_reward_and_loss_curves_to_the_tracker(
    tracker: str, fake_proxy: Any, tiny_model_dir: Path, tiny_model: torch.nn.Module,
    sampler: Callable[..., Trajectory], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "MPLCONFIGDIR"):  # nothing in the real home
        monkeypatch.setenv(name, str(tmp_path / "home" / name.lower()))
    folder = tmp_path / "tracker"
    monkeypatch.setenv("TRACKIO_DIR", str(folder))  # restored after the test (the tracker sets it for trackio)
    proxy, url = fake_proxy
    rewards = [("g0", 1.0), ("g0", 0.0), ("g1", 0.5), ("g1", 0.0), ("g2", 1.0), ("g2", 0.5)]
    for cursor, (group, reward) in enumerate(rewards, start=1):
        proxy.add(sampler(tiny_model, [7, 8], completion=[30, 31], reward=reward, group_id=group, cursor=cursor))
    out = tmp_path / "out"
    argv = ["train", "--admin-url", url, "--operator-key", "op-key", "--run", "run", "--model", str(tiny_model_dir),
            "--group-size", "2", "--output-dir", str(out), "--exit-when-idle", "--stream-wait", "0", "--lr", "1e-2",
            "--tracker", tracker, "--tracker-dir", str(folder)]  # fmt: skip
    assert main(argv) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["reward_mean"] for r in lines] == [0.5, 0.25, 0.75]
    curves = READERS[tracker](folder)
    for key in CURVES:
        assert [step for step, _ in curves[key]] == [r["step"] for r in lines], key
        assert [value for _, value in curves[key]] == pytest.approx([r[key] for r in lines], rel=1e-6), key


def test_unknown_tracker_is_one_clear_line(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["train", "--model", str(tiny_model_dir), "--output-dir", str(tmp_path), "--exit-when-idle"]
    with pytest.raises(SystemExit) as exit_info:
        main([*base, "--tracker", "neptune"])
    assert exit_info.value.code == 2 and "invalid choice: 'neptune'" in capsys.readouterr().err
    monkeypatch.setenv("ROLLWIRE_TRAINER__TRACKER", "neptune")  # the env var skips argparse's choices: same refusal
    assert main(base) == 1
    assert "unknown tracker 'neptune'; known: tensorboard, wandb, mlflow, trackio" in capsys.readouterr().err
