"""Trainer fixtures: the tiny model in memory and trajectories sampled from it (its own behaviour logprobs)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from rollwire.trajectory import Segment, Trajectory


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir), local_files_only=True)


def load_tiny(tiny_model_dir: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    return model.eval()


@torch.no_grad()
def sample_trajectory(
    model: torch.nn.Module,
    prompt: list[int],
    *,
    new_tokens: int = 6,
    completion: list[int] | None = None,
    reward: float | None = 0.0,
    group_id: str = "g0",
    cursor: int = 0,
    version: int = 0,
    seed: int = 0,
) -> Trajectory:
    """Sample (or force) a completion with the model and record its logprobs, as an engine would."""
    gen = torch.Generator().manual_seed(seed)
    ids = list(prompt)
    logprobs: list[float] = []
    for step in range(len(completion) if completion is not None else new_tokens):
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float()
        logp = torch.log_softmax(logits, -1)
        token = completion[step] if completion is not None else int(torch.multinomial(logp.exp(), 1, generator=gen))
        logprobs.append(float(logp[token]))
        ids.append(token)
    n_prompt, n_new = len(prompt), len(ids) - len(prompt)
    segment = Segment(
        token_ids=ids,
        loss_mask=[0] * n_prompt + [1] * n_new,
        logprobs=[0.0] * n_prompt + logprobs,
        policy_versions=[-1] * n_prompt + [version] * n_new,
    )
    return Trajectory(
        rollout_id=f"r-{uuid.uuid4().hex[:8]}",
        run_id="run",
        task_id=group_id,
        group_id=group_id,
        reward=reward,
        status="completed",
        segments=[segment],
        cursor=cursor,
    )


@pytest.fixture()
def sampler() -> Callable[..., Trajectory]:
    """Builds a Trajectory from the tiny model's own sampling (or a forced completion)."""
    return sample_trajectory


@pytest.fixture()
def tiny_model(tiny_model_dir: Path) -> torch.nn.Module:
    """A fresh float32 copy of the tiny model (tests train it)."""
    return load_tiny(tiny_model_dir)


class FakeProxy:
    """The documented stream contract (+ the engine's reload and the proxy's policy-version routes), in memory.

    Used where the real proxy is not needed: cursor resumption, kill/restart. Long-polls check for new
    trajectories every 20 ms until ``wait`` runs out.
    """

    def __init__(self, operator_key: str = "op-key", run: str = "run") -> None:
        import threading

        self.operator_key = operator_key
        self.run = run
        self.lines: list[str] = []
        self.requests: list[dict[str, str]] = []
        self.reloads: list[dict[str, Any]] = []
        self.versions: list[int] = []
        self.caught_up = threading.Event()
        """Set when a stream request finds nothing new: the consumer has taken in everything."""
        self._lock = threading.Lock()

    def add(self, trajectory: Trajectory) -> None:
        import json

        with self._lock:
            self.lines.append(json.dumps(trajectory.to_dict()))
            self.caught_up.clear()

    def _after(self, cursor: int) -> list[str]:
        import json

        with self._lock:
            return [line for line in self.lines if json.loads(line)["cursor"] > cursor]

    def app(self) -> Any:
        import anyio
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response
        from starlette.routing import Route

        async def stream(request: Request) -> Response:
            if request.headers.get("authorization") != f"Bearer {self.operator_key}":
                return JSONResponse({"error": {"message": "bad key"}}, status_code=401)
            if request.query_params.get("run") != self.run:
                return JSONResponse({"error": {"message": "no such run"}}, status_code=404)
            self.requests.append(dict(request.query_params))
            after = int(request.query_params.get("after", 0))
            deadline = anyio.current_time() + float(request.query_params.get("wait", 0))
            lines = self._after(after)
            while not lines and anyio.current_time() < deadline:
                self.caught_up.set()
                await anyio.sleep(0.02)  # the fake server's long poll, as the proxy's route waits for new lines
                lines = self._after(after)
            if not lines:
                self.caught_up.set()
            body = "".join(line + "\n" for line in lines)
            return Response(body, media_type="application/x-ndjson")

        async def reload(request: Request) -> Response:
            body = await request.json()
            self.reloads.append(body)
            return JSONResponse({"weight_version": body["weight_version"], "model_path": body["model_path"]})

        async def policy_version(request: Request) -> Response:
            if request.headers.get("authorization") != f"Bearer {self.operator_key}":
                return JSONResponse({"error": {"message": "bad key"}}, status_code=401)
            self.versions.append(int((await request.json())["version"]))
            return JSONResponse({"version": self.versions[-1]})

        return Starlette(
            routes=[
                Route("/admin/v1/trajectories/stream", stream),
                Route("/reload_weights", reload, methods=["POST"]),
                Route("/admin/v1/policy_version", policy_version, methods=["POST"]),
            ]
        )


@pytest.fixture()
def fake_proxy() -> Any:
    """A FakeProxy served on 127.0.0.1 (port 0); yields (proxy, base_url)."""
    from rollwire.app.serving import ServerThread

    proxy = FakeProxy()
    with ServerThread(proxy.app()) as server:
        yield proxy, server.url
