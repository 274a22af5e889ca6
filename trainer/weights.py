"""Weight sinks: after each update, make the engine serve the new checkpoint, then publish its version.

``WeightSink.push(checkpoint, version)`` is the one interface. Implementations:

- ``EngineReloadSink``: the bundled engine, ``POST /reload_weights {"model_path", "weight_version"}``.
- ``VLLMReloadSink``: vLLM's dev-mode RL endpoints (``VLLM_SERVER_DEV_MODE=1``): ``POST /pause``,
  ``POST /collective_rpc {"method": "reload_weights", "kwargs": {...}}`` (string kwargs, as vLLM
  requires), ``POST /reset_prefix_cache``, ``POST /resume``, then ``POST /update_weight_version
  {"new_version": "<v>"}``. vLLM is always resumed, even when the reload fails. A checkpoint with tied
  embeddings gets its output head written explicitly first (``write_tied_head``): vLLM's in-place reload
  otherwise keeps the old head while the input embedding changes.
- ``VLLMLoraSink``: ``POST /v1/load_lora_adapter {"lora_name", "lora_path", "load_inplace": true}``
  (``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``), for checkpoints that are PEFT adapter folders.

``ProxyVersionPublisher`` then sets the version the proxy records: ``POST /admin/v1/policy_version``.
httpx errors become rollwire errors here, once.
"""

from __future__ import annotations

import json
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
    return _send(client, "POST", url, what, **kwargs)


def _send(client: httpx.Client, method: str, url: str, what: str, **kwargs: Any) -> httpx.Response:
    with _translated(what):
        response = client.request(method, url, **kwargs)
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


TIED_HEAD_FILE = "rollwire-tied-lm_head.safetensors"
EMBEDDING = "model.embed_tokens.weight"
HEAD = "lm_head.weight"


def write_tied_head(checkpoint: Path) -> bool:
    """Write the output head of a tied-embedding checkpoint under its own name; True if one was written.

    Hugging Face saves a tied head once, as the input embedding. vLLM's in-place reload (layer by layer)
    then reloads the embedding but finds nothing for ``lm_head`` and restores its old values: after a push
    that changed the embedding it serves the new embedding with the old head. Naming the head explicitly
    makes vLLM load it; Hugging Face loaders ignore the extra file (or, with a shard index, tie it anyway).
    """
    from safetensors import safe_open
    from safetensors.torch import save_file

    index = checkpoint / "model.safetensors.index.json"
    weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"] if index.is_file() else {}
    shards = sorted(set(weight_map.values())) if weight_map else [p.name for p in checkpoint.glob("*.safetensors")]
    embedding = None
    for shard in shards:
        with safe_open(str(checkpoint / shard), framework="pt") as handle:
            keys = set(handle.keys())
            if HEAD in keys:
                return False  # untied (or already written): vLLM loads the head itself
            if EMBEDDING in keys:
                embedding = handle.get_tensor(EMBEDDING)
    if embedding is None:
        return False  # not a layout this knows (no model.embed_tokens): leave it to the parity probe
    save_file({HEAD: embedding.contiguous()}, str(checkpoint / TIED_HEAD_FILE), metadata={"format": "pt"})
    if weight_map:
        data = json.loads(index.read_text())
        data["weight_map"][HEAD] = TIED_HEAD_FILE
        index.write_text(json.dumps(data, indent=2))
    return True


class VLLMReloadSink:
    """Full weights through vLLM's dev-mode RL endpoints; the checkpoint must be readable by the vLLM workers."""

    def __init__(
        self, base_url: str, client: httpx.Client, rpc_method: str = "reload_weights", explicit_tied_head: bool = True
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client
        self.rpc_method = rpc_method
        self.explicit_tied_head = explicit_tied_head
        """Write a tied head under its own name before the reload (off only to show what goes wrong without)."""

    def push(self, checkpoint: Path, version: int) -> None:
        if self.explicit_tied_head:
            write_tied_head(checkpoint)
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
    """A PEFT adapter folder loaded in place under one adapter name (requests name it as their model): a
    checkpoint's own ``adapter/`` (``rollwire train --lora-rank``), or the checkpoint itself when it is one."""

    def __init__(self, base_url: str, client: httpx.Client, lora_name: str = "rollwire-policy") -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client
        self.lora_name = lora_name

    def push(self, checkpoint: Path, version: int) -> None:
        from rollwire.trainer.adapters import ADAPTER_DIR

        folder = checkpoint / ADAPTER_DIR if (checkpoint / ADAPTER_DIR).is_dir() else checkpoint  # a --lora-rank run's
        if not (folder / "adapter_config.json").is_file():
            raise InvalidRequest(f"{checkpoint} is not a LoRA adapter folder (no adapter_config.json)")
        body = {"lora_name": self.lora_name, "lora_path": str(folder), "load_inplace": True}
        _post(self.client, f"{self.base_url}/v1/load_lora_adapter", "vLLM load_lora_adapter", json=body)


class ProxyVersionPublisher:
    """Tells the proxy (at its admin listener) which policy version later model calls are sampled from."""

    def __init__(self, admin_url: str, operator_key: str, client: httpx.Client) -> None:
        self.url = admin_url.rstrip("/") + "/admin/v1/policy_version"
        self.headers = {"Authorization": f"Bearer {operator_key}"}
        self.client = client

    def publish(self, version: int) -> None:
        _post(self.client, self.url, "proxy policy-version update", json={"version": version}, headers=self.headers)

    def published(self) -> int | None:
        """The version the proxy has been told of last (None: none since it started): a sampler that does not
        train follows the trainer by it."""
        body = _send(self.client, "GET", self.url, "proxy policy-version read", headers=self.headers).json()
        version = body.get("version") if isinstance(body, dict) else None
        return version if isinstance(version, int) and not isinstance(version, bool) else None


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
    "write_tied_head",
]
