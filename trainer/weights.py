"""Weight sinks: after each update, make the engine serve the new checkpoint, then publish its version.

``WeightSink.push(checkpoint, version)`` is the one interface. Implementations:

- ``EngineReloadSink``: the bundled engine, ``POST /reload_weights {"model_path", "weight_version"}``.
- ``VLLMReloadSink``: vLLM's dev-mode RL endpoints (``VLLM_SERVER_DEV_MODE=1``): ``POST /pause``,
  ``POST /collective_rpc {"method": "reload_weights", "kwargs": {...}}`` (string kwargs, as vLLM
  requires), ``POST /reset_prefix_cache``, ``POST /resume``, then ``POST /update_weight_version
  {"new_version": "<v>"}``. vLLM is always resumed, even when the reload fails.
- ``VLLMLoraSink``: ``POST /v1/load_lora_adapter {"lora_name", "lora_path", "load_inplace": true}``
  (``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``), for checkpoints that are PEFT adapter folders.

``ProxyVersionPublisher`` then sets the version the proxy records: ``POST /admin/v1/policy_version``.
httpx errors become rollwire errors here, once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import httpx

from rollwire.errors import InvalidRequest, Unauthorized, UpstreamError, UpstreamTimeout

logger = logging.getLogger(__name__)


class WeightSink(Protocol):
    def push(self, checkpoint: Path, version: int) -> None:
        """Make the serving side use ``checkpoint`` as policy ``version``; raise a RollwireError if it cannot."""
        ...


@contextmanager
def _translated(what: str) -> Iterator[None]:
    try:
        yield
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout(f"{what} timed out") from exc
    except httpx.TransportError as exc:
        raise UpstreamError(f"{what} failed: {exc}") from exc


def _post(client: httpx.Client, url: str, what: str, **kwargs: Any) -> httpx.Response:
    with _translated(what):
        response = client.post(url, **kwargs)
    if response.status_code in (401, 403):
        raise Unauthorized(f"{what} was refused (HTTP {response.status_code})")
    if response.status_code >= 400:
        raise UpstreamError(f"{what} answered HTTP {response.status_code}: {response.text[:200]}")
    return response


class EngineReloadSink:
    """The bundled engine reloads a local HF folder in place and tags later samples with ``version``."""

    def __init__(self, base_url: str, client: httpx.Client, path_prefix: str = "") -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client
        self.path_prefix = path_prefix
        """Where the engine sees the checkpoint root, when it mounts it elsewhere (empty: same path)."""

    def push(self, checkpoint: Path, version: int) -> None:
        path = self.path_prefix.rstrip("/") + "/" + checkpoint.name if self.path_prefix else str(checkpoint)
        body = {"model_path": path, "weight_version": version}
        reply = _post(self.client, f"{self.base_url}/reload_weights", "engine weight reload", json=body).json()
        if int(reply.get("weight_version", -1)) != version:
            raise UpstreamError(f"engine reloaded as version {reply.get('weight_version')}, expected {version}")


class VLLMReloadSink:
    """Full weights through vLLM's dev-mode RL endpoints; the checkpoint must be readable by the vLLM workers."""

    def __init__(self, base_url: str, client: httpx.Client, rpc_method: str = "reload_weights") -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client
        self.rpc_method = rpc_method

    def push(self, checkpoint: Path, version: int) -> None:
        _post(self.client, f"{self.base_url}/pause", "vLLM pause", params={"mode": "wait"})
        try:
            rpc = {"method": self.rpc_method, "kwargs": {"weights_path": str(checkpoint)}}
            _post(self.client, f"{self.base_url}/collective_rpc", "vLLM collective_rpc reload", json=rpc)
            _post(self.client, f"{self.base_url}/reset_prefix_cache", "vLLM prefix-cache reset")
        finally:
            _post(self.client, f"{self.base_url}/resume", "vLLM resume")
        body = {"new_version": str(version)}
        _post(self.client, f"{self.base_url}/update_weight_version", "vLLM weight version", json=body)


class VLLMLoraSink:
    """A PEFT adapter folder loaded in place under one adapter name (requests name it as their model)."""

    def __init__(self, base_url: str, client: httpx.Client, lora_name: str = "rollwire-policy") -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client
        self.lora_name = lora_name

    def push(self, checkpoint: Path, version: int) -> None:
        if not (checkpoint / "adapter_config.json").is_file():
            raise InvalidRequest(f"{checkpoint} is not a LoRA adapter folder (no adapter_config.json)")
        body = {"lora_name": self.lora_name, "lora_path": str(checkpoint), "load_inplace": True}
        _post(self.client, f"{self.base_url}/v1/load_lora_adapter", "vLLM load_lora_adapter", json=body)


class ProxyVersionPublisher:
    """Tells the proxy which policy version later model calls are sampled from."""

    def __init__(self, proxy_url: str, operator_key: str, client: httpx.Client) -> None:
        self.url = proxy_url.rstrip("/") + "/admin/v1/policy_version"
        self.headers = {"Authorization": f"Bearer {operator_key}"}
        self.client = client

    def publish(self, version: int) -> None:
        _post(self.client, self.url, "proxy policy-version update", json={"version": version}, headers=self.headers)


def make_sinks(engine_url: str, vllm_url: str, vllm_mode: str, client: httpx.Client) -> list[WeightSink]:
    """The sinks the settings ask for, in push order."""
    sinks: list[WeightSink] = []
    if engine_url:
        sinks.append(EngineReloadSink(engine_url, client))
    if vllm_url:
        if vllm_mode == "reload":
            sinks.append(VLLMReloadSink(vllm_url, client))
        elif vllm_mode == "lora":
            sinks.append(VLLMLoraSink(vllm_url, client))
        else:
            raise InvalidRequest(f"unknown vLLM push mode {vllm_mode!r} (reload, lora)", param="vllm_mode")
    return sinks


__all__ = [
    "EngineReloadSink",
    "ProxyVersionPublisher",
    "VLLMLoraSink",
    "VLLMReloadSink",
    "WeightSink",
    "make_sinks",
]
