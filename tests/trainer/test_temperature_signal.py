"""Temperature-correct signal, through the proxy in front of the real bundled engine and of real vLLM (CPU build,
served as rollwire serves it: ``--logprobs-mode processed_logprobs``): a call sampled at T=0.5, top_p 0.9 records
its sampling parameters, and the trainer's recomputed logprobs (same temperature, same nucleus) agree with the
recorded behaviour logprobs; without them they do not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import torch
from openai.types.chat import ChatCompletionMessageParam

from rollwire.app.serving import ServerThread
from rollwire.engine import create_app as create_engine
from rollwire.settings import EngineSettings, ProxySettings
from rollwire.trainer.batching import micro_batches, samples_from, token_weights
from rollwire.trainer.forward import forward_logprobs
from rollwire.trajectory import Trajectory

KEY = "op-key"
TOLERANCE = {"bundled": 1e-4, "vllm": 1e-3}
"""Bundled: as the T=1 faithfulness test (engine, KV cache and batched decode, vs one packed forward). vLLM: the
parity probe's tolerance (its own kernels, fp32 on CPU)."""


@pytest.fixture(params=["bundled", "vllm"])
def stack(request: pytest.FixtureRequest, tiny_model_dir: Path, tmp_path: Path) -> Iterator[tuple[str, httpx.Client]]:
    from rollwire.proxy.app import create_app as create_proxy

    def proxied(engine_url: str) -> Iterator[tuple[str, httpx.Client]]:
        settings = ProxySettings(upstream=engine_url, model=str(tiny_model_dir))
        proxy_app = create_proxy(settings, f"sqlite:///{tmp_path / 'proxy.db'}", tmp_path, operator_key=KEY)
        with ServerThread(proxy_app) as proxy, httpx.Client(
            base_url=proxy.urls["admin"], headers={"Authorization": f"Bearer {KEY}"}, timeout=300
        ) as admin:
            yield engine_url, admin

    if request.param == "vllm":
        yield from proxied(str(request.getfixturevalue("vllm_url")))
        return
    engine_app = create_engine(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path / "engine")
    with ServerThread(engine_app) as engine:
        yield from proxied(engine.url)


def _gaps(model: torch.nn.Module, trajectory: Trajectory, *, tempered: bool) -> list[float]:
    samples = samples_from(trajectory, 0.0, tempered=tempered)  # untempered: the recorded parameters ignored
    gaps: list[float] = []
    with torch.no_grad():
        for batch in micro_batches(samples, token_weights(samples, "token-mean"), capacity=512, packed=True, pad_id=0):
            logp, _ = forward_logprobs(model, batch)
            on = batch.loss_mask > 0
            gaps += (logp - batch.behaviour_logprobs).abs()[on].tolist()
    return gaps


def test_recorded_and_recomputed_agree_at_t05_top_p09(
    stack: tuple[str, httpx.Client], tiny_model: torch.nn.Module, request: pytest.FixtureRequest
) -> None:
    engine_url, admin = stack
    engine = request.node.callspec.params["stack"]
    served = httpx.get(f"{engine_url}/v1/models", timeout=30).json()["data"][0]["id"]
    run = admin.post("/admin/v1/runs", json={}).json()["id"]
    rollout = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": 1}).json()[0]
    client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Tell me a story about a lighthouse."}]
    for turn in range(3):  # a spliced multi-turn segment: every call's tokens carry its own parameters
        out = client.chat.completions.create(
            model=served, messages=messages, temperature=0.5, top_p=0.9, max_tokens=24, seed=turn
        )
        messages += [{"role": "assistant", "content": out.choices[0].message.content or ""},
                     {"role": "user", "content": "Go on."}]
    calls = admin.get(f"/admin/v1/rollouts/{rollout['id']}").json()["calls"]
    sampling = [c["sampling"] for c in calls]
    assert all(s is not None and s["temperature"] == 0.5 and s["top_p"] == 0.9 for s in sampling), sampling
    trajectory = Trajectory.from_dict(admin.get(f"/admin/v1/rollouts/{rollout['id']}/trajectory").json())
    sampled = [t for s in trajectory.segments for t, m in zip(s.temperature, s.loss_mask) if m]
    assert sampled and set(sampled) == {0.5}

    tempered = _gaps(tiny_model, trajectory, tempered=True)
    assert len(tempered) == sum(s.num_sampled for s in trajectory.segments) >= 24
    assert max(tempered) < TOLERANCE[engine], max(tempered)
    untempered = _gaps(tiny_model, trajectory, tempered=False)  # the trainer at T=1: another distribution
    print(f"{engine}: {len(tempered)} tokens: |recorded - recomputed| max {max(tempered):.2e} with the recorded T "
          f"and top_p, mean {sum(untempered) / len(untempered):.3f} / max {max(untempered):.3f} at T=1")
    assert sum(untempered) / len(untempered) > 100 * TOLERANCE[engine]


def test_raw_engines_and_sft_use_the_models_own_logprobs() -> None:
    from rollwire.trainer.grpo import GRPOConfig, prepare_grpo
    from rollwire.trajectory import Segment

    def rollout(rid: str, reward: float) -> Trajectory:
        seg = Segment([5, 6, 7], [0, 1, 1], [0.0, -0.1, -0.2], [-1, 0, 0], temperature=[1.0, 0.5, 0.5],
                      top_p=[1.0, 0.9, 0.9])
        return Trajectory(rid, "run", "t", "g", reward, "finished", [seg])

    group = [rollout("a", 1.0), rollout("b", 0.0)]
    processed = prepare_grpo([group], GRPOConfig(), 0).samples
    assert processed[0].temperature == [1.0, 0.5, 0.5] and processed[0].top_p == [1.0, 0.9, 0.9]
    raw = prepare_grpo([group], GRPOConfig(tempered_logprobs=False), 0).samples  # vLLM's default raw_logprobs
    assert raw[0].temperature == [] and raw[0].top_p == []
