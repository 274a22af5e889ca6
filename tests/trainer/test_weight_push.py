"""Weight sinks speak the engine's and vLLM's wire formats, resume vLLM on failure, and publish the version."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import respx

from rollwire.errors import InvalidRequest, UpstreamError
from rollwire.trainer.weights import (
    EngineReloadSink,
    ProxyVersionPublisher,
    VLLMLoraSink,
    VLLMReloadSink,
    make_sinks,
)

BASE = "http://vllm.test"


@respx.mock
def test_engine_reload_body_and_version_check(tmp_path: Path) -> None:
    route = respx.post("http://engine.test/reload_weights").mock(
        return_value=httpx.Response(200, json={"weight_version": 3, "model_path": str(tmp_path)})
    )
    with httpx.Client() as client:
        EngineReloadSink("http://engine.test/", client).push(tmp_path, 3)
        assert json.loads(route.calls[0].request.content) == {"model_path": str(tmp_path), "weight_version": 3}
        with pytest.raises(UpstreamError, match="expected 4"):
            EngineReloadSink("http://engine.test", client).push(tmp_path, 4)


@respx.mock
def test_vllm_reload_sequence_and_wire_format(tmp_path: Path) -> None:
    calls = [
        respx.post(f"{BASE}/pause").mock(return_value=httpx.Response(200, json={"status": "paused"})),
        respx.post(f"{BASE}/collective_rpc").mock(return_value=httpx.Response(200, json={"results": [None]})),
        respx.post(f"{BASE}/reset_prefix_cache").mock(return_value=httpx.Response(200)),
        respx.post(f"{BASE}/resume").mock(return_value=httpx.Response(200, json={"status": "resumed"})),
        respx.post(f"{BASE}/update_weight_version").mock(
            return_value=httpx.Response(200, json={"success": True, "new_version": "7"})
        ),
    ]
    with httpx.Client() as client:
        VLLMReloadSink(BASE, client).push(tmp_path, 7)
    assert [c.call_count for c in calls] == [1, 1, 1, 1, 1]
    order = [call.request.url.path for call in respx.calls]
    assert order == ["/pause", "/collective_rpc", "/reset_prefix_cache", "/resume", "/update_weight_version"]
    assert calls[0].calls[0].request.url.params["mode"] == "wait"
    rpc = json.loads(calls[1].calls[0].request.content)
    assert rpc == {"method": "reload_weights", "kwargs": {"weights_path": str(tmp_path)}}
    assert all(isinstance(v, str) for v in rpc["kwargs"].values())  # vLLM passes only string kwargs
    assert json.loads(calls[4].calls[0].request.content) == {"new_version": "7"}


@respx.mock
def test_vllm_is_resumed_when_the_reload_fails(tmp_path: Path) -> None:
    respx.post(f"{BASE}/pause").mock(return_value=httpx.Response(200, json={"status": "paused"}))
    respx.post(f"{BASE}/collective_rpc").mock(return_value=httpx.Response(500, json={"error": "boom"}))
    resume = respx.post(f"{BASE}/resume").mock(return_value=httpx.Response(200, json={"status": "resumed"}))
    with httpx.Client() as client, pytest.raises(UpstreamError, match="collective_rpc reload answered HTTP 500"):
        VLLMReloadSink(BASE, client).push(tmp_path, 1)
    assert resume.call_count == 1


@respx.mock
def test_vllm_lora_load_body_and_adapter_check(tmp_path: Path) -> None:
    route = respx.post(f"{BASE}/v1/load_lora_adapter").mock(return_value=httpx.Response(200, text="ok"))
    with httpx.Client() as client:
        with pytest.raises(InvalidRequest, match="not a LoRA adapter"):
            VLLMLoraSink(BASE, client).push(tmp_path, 1)
        (tmp_path / "adapter_config.json").write_text("{}")
        VLLMLoraSink(BASE, client, lora_name="policy").push(tmp_path, 1)
    body = json.loads(route.calls[0].request.content)
    assert body == {"lora_name": "policy", "lora_path": str(tmp_path), "load_inplace": True}

    trained = tmp_path / "step-000002"  # a --lora-rank checkpoint: merged weights, the adapter in adapter/
    (trained / "adapter").mkdir(parents=True)
    (trained / "adapter" / "adapter_config.json").write_text("{}")
    with httpx.Client() as client:
        VLLMLoraSink(BASE, client, lora_name="policy").push(trained, 2)
    assert json.loads(route.calls[1].request.content)["lora_path"] == str(trained / "adapter")


@respx.mock
def test_proxy_policy_version_publish_and_sink_selection() -> None:
    route = respx.post("http://proxy.test/admin/v1/policy_version").mock(
        return_value=httpx.Response(200, json={"version": 5})
    )
    with httpx.Client() as client:
        ProxyVersionPublisher("http://proxy.test", "key", client).publish(5)
        assert [type(s).__name__ for s in make_sinks("http://e", "http://v", "lora", client)] == [
            "EngineReloadSink",
            "VLLMLoraSink",
        ]
        with pytest.raises(InvalidRequest, match="unknown vLLM push mode"):
            make_sinks("", "http://v", "nccl", client)
    request = route.calls[0].request
    assert request.headers["authorization"] == "Bearer key" and json.loads(request.content) == {"version": 5}


def test_tied_head_is_written_under_its_own_name_and_indexed(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    from rollwire.trainer.weights import TIED_HEAD_FILE, write_tied_head

    embedding = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    save_file(
        {"model.embed_tokens.weight": embedding, "model.norm.weight": torch.ones(3)}, str(tmp_path / "a.safetensors")
    )
    index = {
        "metadata": {},
        "weight_map": {"model.embed_tokens.weight": "a.safetensors", "model.norm.weight": "a.safetensors"},
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert write_tied_head(tmp_path) is True
    assert torch.equal(load_file(str(tmp_path / TIED_HEAD_FILE))["lm_head.weight"], embedding)
    weight_map = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    assert weight_map["lm_head.weight"] == TIED_HEAD_FILE  # vLLM loads only the files the index names
    assert write_tied_head(tmp_path) is False  # the head is there now: nothing more to write


def test_an_untied_checkpoint_is_left_alone(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    from rollwire.trainer.weights import write_tied_head

    save_file(
        {"model.embed_tokens.weight": torch.zeros(4, 3), "lm_head.weight": torch.ones(4, 3)},
        str(tmp_path / "model.safetensors"),
    )
    assert write_tied_head(tmp_path) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
