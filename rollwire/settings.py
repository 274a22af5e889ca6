"""The one Settings object: read once at the CLI edge, each component gets only its own sub-model.

Precedence: a CLI flag beats an env var (``ROLLWIRE_<PART>__<FIELD>``), which beats the default.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_home() -> Path:
    """Where rollwire keeps its cache (the tiny model) and default store."""
    return Path.home() / ".cache" / "rollwire"


class StoreSettings(BaseModel):
    url: str = Field("", description="SQLAlchemy URL of the trace store; empty means SQLite under the home folder.")


class EngineSettings(BaseModel):
    host: str = Field("127.0.0.1", description="Interface the bundled engine binds to.")
    port: int = Field(8100, description="Port of the bundled engine.")
    model: str = Field("", description="Local Hugging Face checkpoint folder; empty means the tiny default model.")
    served_model_name: str = Field("", description="Model name the engine answers to; default: the folder name.")
    max_batch_size: int = Field(16, description="Most sequences decoded together in one batch step.")
    max_model_len: int = Field(0, description="Context length; 0 means the model config's.")
    device: str = Field("auto", description="torch device: auto, cpu or cuda.")


class ProxySettings(BaseModel):
    host: str = Field("127.0.0.1", description="Interface the proxy binds to.")
    port: int = Field(8000, description="Port of the proxy.")
    upstream: str = Field("http://127.0.0.1:8100", description="Base URL of the vLLM-compatible engine.")
    model: str = Field("", description="Tokenizer + chat template source (local folder); empty means the tiny model.")
    operator_key: str = Field("", description="Key for /admin and /ui; empty means a random one, printed at start.")
    splice_policy: str = Field("splice", description="'splice' reuses earlier calls' exact ids; 'render' re-renders.")
    tool_parser: str = Field("hermes", description="Tool-call parser by name (hermes, llama3_json).")
    reasoning_parser: str = Field("qwen3", description="Reasoning parser by name (qwen3, none).")
    model_aliases: dict[str, str] = Field(
        default_factory=dict, description="Requested model name -> served model name; '*' matches any."
    )
    upstream_timeout_s: float = Field(600.0, description="Longest wait for one upstream generation.")
    max_body_bytes: int = Field(8 * 1024 * 1024, description="Request bodies above this get 413.")


class KubernetesSettings(BaseModel):
    namespace: str = Field("rollwire", description="Namespace the rollout pods (and the stack) run in.")
    kubeconfig: str = Field("", description="Path of a kubeconfig; empty means in-cluster config, then ~/.kube/config.")
    context: str = Field("", description="kubeconfig context to use; empty means the current one.")
    image: str = Field("ghcr.io/rollwire/rollwire:0.1.0", description="Default rollout image when the adapter names none.")
    image_pull_policy: str = Field("IfNotPresent", description="imagePullPolicy of rollout pods.")
    cpu: str = Field("500m", description="CPU request (and limit) of one rollout pod.")
    memory: str = Field("1Gi", description="Memory request (and limit) of one rollout pod.")
    service_account: str = Field("rollwire-rollout", description="ServiceAccount rollout pods run as (no API rights).")
    node_selector: dict[str, str] = Field(default_factory=dict, description="nodeSelector for rollout pods.")
    api_retries: int = Field(6, description="Attempts for one API call that answers 429/5xx or cannot connect.")
    api_backoff_s: float = Field(0.2, description="First back-off after a 429/5xx; doubles each attempt, capped at 10 s.")
    api_concurrency: int = Field(16, description="Most Kubernetes API calls in flight at once from one orchestrator.")
    watch_timeout_s: int = Field(60, description="Server-side timeout of one pod watch before it is reopened.")
    warm_pool: int = Field(0, description="Ready pods kept per image for the next rollouts; 0 turns the pool off.")


class OrchestratorSettings(BaseModel):
    runtime: str = Field("local", description="Where rollouts run: 'local' (a subprocess each) or 'kubernetes' (a Pod each).")
    concurrency: int = Field(8, description="Most rollouts running at once.")
    deadline_s: float = Field(900.0, description="Wall-clock limit of one rollout; past it the rollout is timed_out.")
    max_attempts: int = Field(3, description="Attempts per rollout for infrastructure failures (never for a low reward).")
    log_tail_lines: int = Field(50, description="Lines of a rollout's output kept in Rollout.log_tail.")
    workspace_root: str = Field("", description="Folder for local rollout workspaces; empty means the system temp folder.")
    keep_workspaces: bool = Field(False, description="Keep local rollout workspaces after they finish (debugging).")
    proxy_url: str = Field("", description="Proxy base URL as rollouts see it; empty means http://<proxy.host>:<proxy.port>.")
    gateway_url: str = Field("", description="MCP gateway base URL as rollouts see it; empty means the proxy URL.")
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ROLLWIRE_", env_nested_delimiter="__", extra="ignore")

    home: Path = Field(default_factory=default_home, description="Cache and default data folder.")
    log_level: str = Field("INFO", description="Logging level for CLI processes.")
    store: StoreSettings = Field(default_factory=StoreSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    orchestrator: OrchestratorSettings = Field(default_factory=OrchestratorSettings)

    def store_url(self) -> str:
        """The store URL, defaulting to a SQLite file in the home folder."""
        if self.store.url:
            return self.store.url
        return f"sqlite:///{self.home / 'rollwire.db'}"


__all__ = [
    "EngineSettings",
    "KubernetesSettings",
    "OrchestratorSettings",
    "ProxySettings",
    "Settings",
    "StoreSettings",
    "default_home",
]
