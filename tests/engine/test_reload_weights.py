"""POST /reload_weights swaps in a changed checkpoint without a restart: outputs and version label change."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from rollwire.app.serving import ServerThread
from rollwire.engine import create_app
from rollwire.settings import EngineSettings

GREEDY = {
    "prompt": [20, 21, 22, 23],
    "max_tokens": 8,
    "temperature": 0,
    "logprobs": 0,
    "return_token_ids": True,
    "ignore_eos": True,
}


@pytest.fixture()
def own_engine(tiny_model_dir: Path, tmp_path: Path) -> Iterator[str]:
    """A private engine: reloading must not change the weights other test modules see."""
    with ServerThread(create_app(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path)) as server:
        yield server.url


def _perturbed_copy(source: Path, target: Path) -> Path:
    from transformers import AutoModelForCausalLM

    shutil.copytree(source, target)
    model = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.5)
    model.save_pretrained(str(target))
    return target


def _greedy(client: httpx.Client) -> tuple[str, dict[str, Any]]:
    reply = client.post("/v1/completions", json=GREEDY)
    assert reply.status_code == 200
    return reply.headers["x-weight-version"], reply.json()


def test_reload_changes_outputs_and_version(own_engine: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    changed = _perturbed_copy(tiny_model_dir, tmp_path / "step-1")
    with httpx.Client(base_url=own_engine, timeout=120) as client:
        header, before = _greedy(client)
        assert header == "0" and before["weight_version"] == 0

        reply = client.post("/reload_weights", json={"model_path": str(changed), "weight_version": None})
        assert reply.status_code == 200
        assert reply.json() == {"weight_version": 1, "model_path": str(changed)}
        assert client.get("/weight_version").json() == {"weight_version": 1, "model_path": str(changed)}

        header, after = _greedy(client)
        assert header == "1" and after["weight_version"] == 1
        old, new = before["choices"][0], after["choices"][0]
        assert old["logprobs"]["token_logprobs"] != new["logprobs"]["token_logprobs"]
        assert old["token_ids"] != new["token_ids"]

        reply = client.post("/reload_weights", json={"model_path": str(tiny_model_dir), "weight_version": 7})
        assert reply.json()["weight_version"] == 7
        header, restored = _greedy(client)
        assert header == "7" and restored["choices"][0]["token_ids"] == old["token_ids"]


def test_reload_from_a_missing_folder_is_404_and_keeps_serving(own_engine: str, tmp_path: Path) -> None:
    with httpx.Client(base_url=own_engine, timeout=60) as client:
        reply = client.post("/reload_weights", json={"model_path": str(tmp_path / "nowhere")})
        assert reply.status_code == 404 and "does not exist" in reply.json()["error"]["message"]
        empty = tmp_path / "empty"
        empty.mkdir()
        reply = client.post("/reload_weights", json={"model_path": str(empty)})
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "model_path"
        assert client.get("/weight_version").json()["weight_version"] == 0
        assert _greedy(client)[0] == "0"


def test_reload_waits_for_in_flight_completions(own_engine: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    """A completion running when a reload arrives finishes on the old weights and reports the old version."""
    import asyncio
    import json

    import anyio

    changed = _perturbed_copy(tiny_model_dir, tmp_path / "step-1")

    async def main() -> tuple[set[int], int, int]:
        tokens: list[int] = []
        versions: set[int] = set()
        started = asyncio.Event()
        async with httpx.AsyncClient(base_url=own_engine, timeout=120) as client:

            async def generate() -> None:
                body = {"prompt": [5, 6], "max_tokens": 200, "stream": True, "ignore_eos": True}
                async with client.stream("POST", "/v1/completions", json=body) as reply:
                    async for line in reply.aiter_lines():
                        if line.startswith("data: {"):
                            chunk = json.loads(line[6:])
                            versions.add(chunk["weight_version"])
                            tokens.append(len(chunk["choices"]))
                            started.set()

            async def reload() -> int:
                await started.wait()
                reply = await client.post("/reload_weights", json={"model_path": str(changed)})
                return int(reply.json()["weight_version"])

            with anyio.fail_after(60):
                _, version = await asyncio.gather(generate(), reload())
        return versions, version, sum(tokens)

    versions, version, generated = asyncio.run(main())
    assert versions == {0} and version == 1 and generated == 200  # ran to the end, all on version 0
    assert httpx.post(f"{own_engine}/v1/completions", json=GREEDY, timeout=60).json()["weight_version"] == 1
