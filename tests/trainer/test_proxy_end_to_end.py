"""End to end over HTTP: engine <- proxy (recording) -> trajectory stream -> `rollwire train` -> weights back.

Rollouts talk to the real proxy with the official openai client (two turns each, so the second call splices
onto the first); the trainer reads them from the real stream. On these fresh on-policy trajectories the
trainer's recomputed logprobs match the recorded ones within LOGPROB_TOLERANCE and the first update's
ratios are 1. After the push, new rollouts are recorded with policy version 1 and are faithful to the
checkpoint the trainer wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import torch

from rollwire.app.cli.__main__ import main
from rollwire.app.serving import ServerThread
from rollwire.engine import create_app as create_engine
from rollwire.proxy.app import create_app as create_proxy
from rollwire.settings import EngineSettings, ProxySettings
from rollwire.trainer.batching import micro_batches, samples_from, token_weights
from rollwire.trainer.forward import forward_logprobs
from rollwire.trainer.stream import StreamConfig, TrajectoryStream
from rollwire.trajectory import Trajectory
from tests.sampling import SAMPLE_SEED

KEY = "e2e-operator-key"
LOGPROB_TOLERANCE = 1e-4


@pytest.fixture()
def stack(tiny_model_dir: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(engine URL, the proxy's admin URL): a private engine (the test reloads it) and a proxy recording into
    SQLite (its rollouts' links name its main listener)."""
    engine = ServerThread(create_engine(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path / "e"))
    with engine:
        settings = ProxySettings(upstream=engine.url, model=str(tiny_model_dir), sample_seed=SAMPLE_SEED)
        app = create_proxy(settings, f"sqlite:///{tmp_path / 'store.db'}", tmp_path, operator_key=KEY)
        with ServerThread(app) as proxy:
            yield engine.url, proxy.urls["admin"]


def _play(admin: httpx.Client, run: str, group: str, count: int, model: str) -> list[str]:
    made = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": count, "task_id": group, "group_id": group})
    made.raise_for_status()
    ids = []
    for i, rollout in enumerate(made.json()):
        client = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
        messages: list[dict[str, str]] = [{"role": "user", "content": f"task {group}: say something"}]
        for _turn in range(2):
            reply = client.chat.completions.create(model=model, messages=messages, max_tokens=5, temperature=1.0)  # type: ignore[arg-type]
            messages += [{"role": "assistant", "content": reply.choices[0].message.content or ""},
                         {"role": "user", "content": "and again"}]
        finish = admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json={"status": "finished", "reward": float(i)})
        finish.raise_for_status()
        ids.append(rollout["id"])
    return ids


def _read_all(admin_url: str, run: str) -> list[Trajectory]:
    stream = TrajectoryStream(StreamConfig(admin_url, KEY, run, wait_s=0))
    out: list[Trajectory] = []
    while batch := stream.poll():
        out.extend(batch)
    stream.close()
    return out


def _gap(model: torch.nn.Module, trajectories: list[Trajectory]) -> tuple[float, int]:
    samples = [s for t in trajectories for s in samples_from(t, 0.0)]
    gap, tokens = 0.0, 0
    with torch.no_grad():
        for batch in micro_batches(samples, token_weights(samples, "token-mean"), capacity=512, packed=True, pad_id=0):
            logp, _ = forward_logprobs(model, batch)
            gap = max(gap, float(((logp - batch.behaviour_logprobs).abs() * batch.loss_mask).max()))
            tokens += int(batch.loss_mask.sum())
    return gap, tokens


@pytest.mark.slow
def test_train_from_the_proxy_stream_and_push_back(
    stack: tuple[str, str], tiny_model: torch.nn.Module, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    engine, admin_url = stack
    admin = httpx.Client(base_url=admin_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
    model_name = httpx.get(f"{engine}/v1/models", timeout=10).json()["data"][0]["id"]
    run = admin.post("/admin/v1/runs", json={"name": "e2e"}).json()["id"]
    played = _play(admin, run, "g1", 2, model_name) + _play(admin, run, "g2", 2, model_name)

    recorded = _read_all(admin_url, run)
    assert sorted(t.rollout_id for t in recorded) == sorted(played)
    assert {v for t in recorded for v in t.policy_versions} == {0}
    gap, tokens = _gap(tiny_model, recorded)
    assert tokens >= 4 * 2 and gap < LOGPROB_TOLERANCE  # the trainer sees the numbers the engine sampled with

    out = tmp_path / "train"
    argv = ["train", "--admin-url", admin_url, "--operator-key", KEY, "--run", run, "--output-dir", str(out),
            "--group-size", "2", "--groups-per-step", "2", "--lr", "1e-2", "--engine-url", engine,
            "--exit-when-idle", "--stream-wait", "0"]
    assert main(argv) == 0
    (step,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert step["ratio_deviation_max"] < 1e-3 and step["clip_fraction"] == 0.0  # first update: ratios are 1
    assert sorted(step["rollout_ids"]) == sorted(played) and step["policy_version"] == 1
    assert httpx.get(f"{engine}/weight_version", timeout=10).json()["weight_version"] == 1

    later = _play(admin, run, "g3", 1, model_name)
    (fresh,) = [t for t in _read_all(admin_url, run) if t.rollout_id in later]
    assert fresh.policy_versions == {1}
    trained = AutoModelForCausalLM.from_pretrained(str(out / "step-000001"), dtype=torch.float32).eval()
    assert _gap(trained, [fresh])[0] < LOGPROB_TOLERANCE
    assert _gap(tiny_model, [fresh])[0] > 10 * LOGPROB_TOLERANCE  # the weights really changed

    exported = tmp_path / "trl.jsonl"
    argv = ["export", "--admin-url", admin_url, "--operator-key", KEY, "--run", run, "--flavor", "trl",
            "--out", str(exported)]
    assert main(argv) == 0
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    by_ids = {tuple(t.segments[0].token_ids): t.segments[0].loss_mask for t in _read_all(admin_url, run)}
    assert len(rows) == 5 and all(by_ids[tuple(r["input_ids"])] == r["assistant_masks"] for r in rows)
    admin.close()
