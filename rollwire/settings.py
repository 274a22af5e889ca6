"""The one Settings object: read once at the CLI edge, each component gets only its own sub-model.

Precedence: a CLI flag beats an env var (``ROLLWIRE_<PART>__<FIELD>``), which beats the default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

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
    model: str = Field(
        "", description="A model name (tiny, smollm2-135m) or a local Hugging Face checkpoint folder; empty: tiny."
    )
    served_model_name: str = Field("", description="Model name the engine answers to; default: the folder name.")
    max_batch_size: int = Field(16, description="Most sequences decoded together in one batch step.")
    max_model_len: int = Field(0, description="Context length; 0 means the model config's.")
    device: str = Field("auto", description="torch device: auto, cpu or cuda.")
    max_body_bytes: int = Field(8 * 1024 * 1024, description="Engine request bodies above this get 413.")
    prefix_cache_mib: int = Field(
        1024,
        description="Memory kept for earlier prompts' keys and values (least recently used out), so a call that "
        "continues a conversation prefills only its new tokens; 0 turns prefix caching off.",
    )
    threads: int = Field(
        1, description="torch intra-op threads of an engine process (set by the CLI); 0 keeps torch's default."
    )


class ProxySettings(BaseModel):
    host: str = Field("127.0.0.1", description="Interface the proxy binds to.")
    port: int = Field(8000, description="Port of the proxy's main listener: the rollout routes, all rollouts reach.")
    admin_host: str = Field(
        "", description="Interface the admin listener (/admin, /ui, /metrics) binds to; empty means the proxy's host."
    )
    admin_port: int | None = Field(
        None,
        description="Port of the admin listener (/admin, /ui, /metrics), which no rollout may reach; unset means "
        "the proxy's port + 1.",
    )
    upstream: str = Field("http://127.0.0.1:8100", description="Base URL of the vLLM-compatible engine.")
    gateway_url: str = Field(
        "", description="MCP gateway base URL put into rollouts' mcp_url; empty means the proxy's own address."
    )
    model: str = Field(
        "", description="Tokenizer + chat template source: a model name (tiny, smollm2-135m) or a local folder; empty: tiny."
    )
    operator_key: str = Field(
        "", description="Key for /admin and /ui (set it here or in the environment, never on a command line others "
        "can list); empty means a random one, printed at start.",
    )
    splice_policy: str = Field("splice", description="'splice' reuses earlier calls' exact ids; 'render' re-renders.")
    prefix_cache_scope: str = Field(
        "rollout",
        description="Which calls may reuse each other's prompt prefixes cached in the engine (sent as vLLM's "
        "cache_salt): 'rollout' (a rollout's own calls; no rollout can time another's prompts) or 'shared' (all calls).",
    )
    sample_seed: int | None = Field(
        None,
        description="Seed for the requests that bring none: each gets one derived from this, its prompt tokens and "
        "how often that prompt came before (recorded with the call), so a run samples the same way again (tests, "
        "replaying a failure). Unset: the engine's own randomness.",
    )
    tool_parser: str = Field("hermes", description="Tool-call parser by name (hermes, llama3_json).")
    reasoning_parser: str = Field("qwen3", description="Reasoning parser by name (qwen3, none).")
    model_aliases: dict[str, str] = Field(
        default_factory=dict, description="Requested model name -> served model name; '*' matches any."
    )
    strict_models: bool = Field(
        False,
        description="Refuse (404) a model name that is neither served nor aliased; by default, while the upstream "
        "serves one model, any name a harness sends (claude-*, gpt-*) is answered by it and recorded as requested.",
    )
    upstream_timeout_s: float = Field(600.0, description="Longest wait for one upstream generation.")
    max_body_bytes: int = Field(8 * 1024 * 1024, description="Request bodies above this get 413.")
    default_max_output_tokens: int | None = Field(
        None, description="Output cap for requests that set none (Codex never does); unset: the rest of the context."
    )
    workers: int = Field(1, description="Proxy processes sharing the port (each splices exactly: see shared_store).")
    shared_store: bool = Field(
        True,
        description="Other proxy processes (replicas, --workers) may write this store: before a splice, ask the "
        "store for the rollout's calls this process has not seen. Off only for a proxy that owns its store.",
    )
    cache_rollouts: int = Field(4096, description="Rollouts whose earlier calls one proxy process keeps in memory.")
    cache_tokens: int = Field(
        20_000_000, description="Prompt + sampled token ids those cached calls may hold in all (oldest dropped first)."
    )
    cache_message_bytes: int = Field(
        256 * 1024 * 1024,
        description="Bytes of JSON messages kept parsed, each rollout's latest request's (least recently called "
        "rollouts dropped first; a call parses only what its rollout did not send before), and again of each "
        "rollout's latest request body, to find what the next one resends. 0: parse every request whole.",
    )


QUANTITY = r"^[0-9]*[1-9][0-9]*(\.[0-9]+)?([KMGTPE]i|[kMGTPE])?$"
"""A Kubernetes storage quantity of at least 1 (``2Gi``, ``500M``): a typo fails at start rather than as every
rollout's create, and 0 (which the kubelet reads as no limit) is refused."""


class KubernetesSettings(BaseModel):
    namespace: str = Field("rollwire", description="Namespace the rollout pods (and the stack) run in.")
    kubeconfig: str = Field("", description="Path of a kubeconfig; empty means in-cluster config, then ~/.kube/config.")
    context: str = Field("", description="kubeconfig context to use; empty means the current one.")
    image: str = Field("ghcr.io/rollwire/rollwire:0.1.0", description="Default rollout image when the adapter names none.")
    image_pull_policy: str = Field("IfNotPresent", description="imagePullPolicy of rollout pods.")
    image_registry: str = Field(
        "", description="Registry (and path) replacing ghcr.io/rollwire in every rollwire image: stack and rollouts."
    )
    cpu: str = Field("500m", description="CPU request (and limit) of one rollout pod.")
    memory: str = Field("1Gi", description="Memory request (and limit) of one rollout pod.")
    ephemeral_storage: str = Field(
        "4Gi",
        description="ephemeral-storage request (and limit) of each rollout pod container, so also the pod's total: "
        "its emptyDirs, logs and writable layer together. Past it the kubelet evicts the pod, which is the "
        "rollout's own failure (exit 137), never retried.",
        pattern=QUANTITY,
    )
    workspace_size: str = Field(
        "2Gi",
        description="sizeLimit of a rollout pod's /workspace emptyDir, its harness's home (past it: evicted, the "
        "rollout's own failure).",
        pattern=QUANTITY,
    )
    tmp_size: str = Field(
        "1Gi", description="sizeLimit of a rollout pod's /tmp emptyDir (past it: evicted, the rollout's own failure).",
        pattern=QUANTITY,
    )
    service_account: str = Field("rollwire-rollout", description="ServiceAccount rollout pods run as (no API rights).")
    node_selector: dict[str, str] = Field(default_factory=dict, description="nodeSelector for rollout pods.")
    api_retries: int = Field(6, description="Attempts for one API call that answers 429/5xx or cannot connect.")
    api_backoff_s: float = Field(0.2, description="First back-off after a 429/5xx; doubles each attempt, capped at 10 s.")
    api_concurrency: int = Field(16, description="Most Kubernetes API calls in flight at once from one orchestrator.")
    watch_timeout_s: int = Field(60, description="Server-side timeout of one pod watch before it is reopened.")
    warm_pool: int = Field(
        0,
        description="Ready rollout pods kept per image (0: none): a rollout claims one (its Secret, then a label "
        "patch) instead of waiting for a new pod to be scheduled, pulled and started.",
    )
    warm_pool_idle_s: int = Field(1800, description="Longest a warm pod waits unclaimed before the kubelet ends it.")
    mcp_config: str = Field(
        "",
        description='The mcpServers file the gateway reads (--mcp-config): each rollout pod gets its "scope": '
        '"rollout" servers as sidecars. Empty: none.',
    )
    mcp_sidecar_secret: str = Field(
        "",
        description="The deployment's MCP sidecar secret (also the gateway's sidecar_secret): each rollout's sidecars "
        "answer only a key derived from it and the rollout id.",
    )
    mcp_runner_image: str = Field(
        "ghcr.io/rollwire/mcp-runner:0.1.0",
        description="Image of MCP servers that name none: rollwire's bridge, Node and pinned npm/PyPI servers.",
    )
    mcp_sidecar_port: int = Field(
        8400,
        gt=0,
        lt=65000,
        description="Port of a rollout pod's first MCP sidecar; each further rollout-scoped server (by name) takes the "
        "next. The gateway reads the same setting.",
    )
    trainer_volume_claim: str = Field(
        "rollwire-trainer",
        description="PersistentVolumeClaim the trainer Job of `rollwire rl` mounts at /var/lib/rollwire: its warm "
        "model and the run's checkpoints, so a restarted Job resumes.",
    )
    mcp_startup_timeout_s: int = Field(
        60, gt=0, description="Longest a rollout's MCP sidecar may take to answer initialize before the rollout fails."
    )


class OrchestratorSettings(BaseModel):
    runtime: str = Field("local", description="Where rollouts run: 'local' (a subprocess each) or 'kubernetes' (a Pod each).")
    concurrency: int = Field(8, description="Most rollouts running at once.")
    deadline_s: float = Field(900.0, description="Wall-clock limit of one rollout; past it the rollout is timed_out.")
    max_attempts: int = Field(3, description="Attempts per rollout for infrastructure failures (never for a low reward).")
    log_tail_lines: int = Field(50, description="Lines of a rollout's output kept in Rollout.log_tail.")
    checker_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Wall-clock limit of scoring one rollout; past it the checker is killed and the rollout fails as "
        "the policy's own doing (its final state made the checker run that long).",
    )
    checker_max_memory_mb: int = Field(
        512,
        gt=0,
        description="Memory a rollout's checker may map beyond its preloaded interpreter, MiB (RLIMIT_AS); past it "
        "the rollout fails as the policy's own doing.",
    )
    workspace_root: str = Field("", description="Folder for local rollout workspaces; empty means the system temp folder.")
    keep_workspaces: bool = Field(False, description="Keep local rollout workspaces after they finish (debugging).")
    warm_pool: bool = Field(
        True,
        description="Local runtime: fork `python -m MODULE` harnesses from a process that has already imported "
        "warm_preload (other launches still start as plain subprocesses).",
    )
    warm_preload: list[str] = Field(
        default_factory=lambda: [
            "openai",
            "mcp",
            "rollwire.harness_adapters.reference_agent",
            "rollwire.app.cli.__main__:build_parser",
        ],
        description="Modules the warm pool imports once ('module', or 'module:function' to also call it); a value "
        "they compute from the environment at import time (HOME, env vars) keeps the pool's, not the rollout's.",
    )
    proxy_url: str = Field("", description="Proxy base URL as rollouts see it; empty means http://<proxy.host>:<proxy.port>.")
    gateway_url: str = Field("", description="MCP gateway base URL as rollouts see it; empty means the proxy URL.")
    sandbox: bool = Field(
        True,
        description="Local runtime: run each rollout's harness in a bubblewrap sandbox (host read-only, only its "
        "workspace writable, network only to the proxy and gateway). Off runs harnesses with the user's full access.",
    )
    bwrap_path: str = Field("bwrap", description="The bubblewrap binary the local sandbox uses.")
    warm_spares: int = Field(
        2, description="Sandboxed warm pool: sandboxes kept ready ahead, each with the preloads imported (~80 MB each)."
    )
    sandbox_max_processes: int = Field(512, description="Most processes of one sandboxed rollout (RLIMIT_NPROC; 0: none).")
    sandbox_max_memory_mb: int = Field(
        8192, description="Data-segment limit of each process of a sandboxed rollout, MiB (RLIMIT_DATA; 0: none)."
    )
    max_disk_mb: int = Field(
        4096,
        ge=0,
        description="Local runtime: disk a rollout's folder (workspace, /tmp, output) may use, MiB (0: no limit). "
        "Measured every second or so while it runs; past it the rollout is killed and fails as the policy's own "
        "doing. In the sandbox no one file may grow past it either (RLIMIT_FSIZE).",
    )
    sandbox_hidden: list[str] = Field(
        default_factory=list, description="Extra host folders a sandboxed rollout must not see (state folders)."
    )
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)


class TrainerSettings(BaseModel):
    admin_url: str = Field(
        "http://127.0.0.1:8001",
        description="The proxy's admin listener, where the trainer reads the trajectory stream and publishes the "
        "policy version (its admin port, not the one rollouts call).",
    )
    operator_key: str = Field("", description="Operator key for the proxy's /admin routes (stream, policy version).")
    run: str = Field("", description="Run id whose trajectories to train on.")
    model: str = Field(
        "", description="Checkpoint to start from: a model name (tiny, smollm2-135m) or a local HF folder; empty: tiny."
    )
    algo: str = Field("grpo", description="Training algorithm: grpo or sft.")
    output_dir: str = Field("", description="Checkpoints + metrics folder; empty means <home>/train/<run>.")
    lr: float = Field(1e-5, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, description="AdamW weight decay.")
    lora_rank: int = Field(
        0, ge=0, description="Train LoRA adapters of this rank (PEFT; checkpoints hold merged weights); 0: every weight."
    )
    lora_alpha: float = Field(0.0, ge=0, description="LoRA scale numerator (delta = B A alpha / rank); 0 means 2 x rank.")
    lora_targets: str = Field(
        "all-linear", description="Modules LoRA adapts: all-linear (all but the output head) or names, comma-separated."
    )
    max_grad_norm: float = Field(1.0, description="Clip the gradient norm of each step to this (0: no clipping).")
    micro_batch_tokens: int = Field(4096, description="Tokens (with padding) in one forward/backward micro-batch.")
    packing: bool = Field(True, description="Pack several sequences per row (position ids restart per sequence).")
    share_prefixes: bool = Field(
        True, description="Forward a prompt that several samples share (a GRPO group's) once per micro-batch."
    )
    group_size: int = Field(4, description="Rollouts per task group; a group trains once this many arrived.")
    groups_per_step: int = Field(1, description="Task groups in one GRPO step.")
    sft_batch_size: int = Field(8, description="Trajectories in one SFT step.")
    sft_min_reward: float | None = Field(None, description="SFT keeps only rollouts with at least this reward.")
    scale_std: bool = Field(False, description="Divide group advantages by the group's reward std.")
    keep_zero_variance: bool = Field(False, description="Keep groups whose rewards all agree (advantage 0).")
    clip_low: float = Field(0.2, description="PPO clip: ratio lower bound is 1 - clip_low.")
    clip_high: float = Field(0.2, description="PPO clip: ratio upper bound is 1 + clip_high.")
    ratio_cap: float | None = Field(None, description="Truncate importance ratios above this for negative advantages.")
    max_policy_lag: int | None = Field(None, description="Drop rollouts sampled more than this many versions ago.")
    train_side_calls: bool = Field(
        False, description="GRPO also trains on side-call segments (titles, compaction summaries); off: the agents' lines only "
        "(main and sub-agents)."
    )
    kl_coef: float = Field(0.0, description="Weight of the KL to the reference (starting) model; 0 turns it off.")
    aggregation: str = Field(
        "token-mean", description="Loss aggregation: token-mean, sequence-mean (per rollout) or constant (Dr.GRPO)."
    )
    loss_normaliser: int = Field(0, description="Tokens per rollout the constant aggregation divides by (Dr.GRPO).")
    std_scale: str = Field("none", description="Scale GRPO advantages by the group std, the batch std, or none.")
    baseline: str = Field("mean", description="Advantage baseline: mean (GRPO) or rloo (leave-one-out).")
    ratio_level: str = Field("token", description="Importance ratio per token (GRPO) or per sequence (GSPO).")
    mask_truncated: bool = Field(False, description="Leave rollouts with a length-truncated call out of the loss.")
    entropy_coef: float = Field(0.0, description="Weight of the entropy bonus in the GRPO loss; 0 turns it off.")
    failure_reward: float | None = Field(
        0.0, description="Reward of rollouts the policy failed (harness exit, deadline, budget); null leaves them out."
    )
    is_correction: str = Field(
        "auto", description="Engine-trainer mismatch correction: none, tis, mis; auto is tis with vLLM, else none."
    )
    is_level: str = Field("token", description="Importance weights per token or per sequence.")
    logprobs_mode: str = Field(
        "processed_logprobs",
        description="What the engine's logprobs are: processed_logprobs (after temperature/top_p: the bundled engine, "
        "vLLM with --logprobs-mode processed_logprobs) or raw_logprobs (vLLM's default); the trainer matches it.",
    )
    is_cap: float = Field(2.0, description="Upper bound of the importance weight (TIS truncates, MIS rejects above it).")
    max_steps: int = Field(0, description="Stop after this many steps in total; 0 means run until stopped.")
    until_version: int = Field(0, description="Stop once the policy reaches this version; 0 means no such limit.")
    epochs: int = Field(1, ge=1, description="Clipped passes over each update's groups (one version per update).")
    purpose: str = Field(
        "", description="Train only on the run's rollouts with this meta.purpose (rollwire rl's: train); empty: all."
    )
    dynamic_sampling: bool = Field(
        False, description="Leave groups with no reward spread out before they fill a step (consumed, never trained)."
    )
    stream_wait_s: float = Field(20.0, description="Long-poll wait of one trajectory-stream request.")
    exit_when_idle: bool = Field(False, description="Exit when one long-poll returns nothing (batch jobs, tests).")
    engine_url: str = Field("", description="Bundled engine to push weights to (POST /reload_weights); empty: none.")
    vllm_url: str = Field("", description="vLLM server to push weights to; empty: none.")
    vllm_mode: str = Field("reload", description="How to push to vLLM: reload (dev-mode RL endpoints) or lora.")
    publish_version: bool = Field(True, description="After a push, POST the new policy version to the proxy.")
    parity_tolerance: float = Field(
        1e-3,
        description="After each push, most |engine - trainer| logprob on a fixed greedy probe before the push "
        "fails (fp32 on CPU agrees to ~1e-5; raise it for bf16 engines); negative turns the probe off.",
    )
    keep_checkpoints: int = Field(2, description="Checkpoints kept in the output folder.")
    tracker: str = Field(
        "", description="Also log step metrics to: tensorboard, wandb (offline), mlflow or trackio; empty: none."
    )
    tracker_dir: str = Field("", description="Folder the tracker writes its run to; empty means <output dir>/<tracker>.")
    tracker_project: str = Field("rollwire", description="Project (W&B, trackio) or experiment (MLflow) of the run.")
    seed: int = Field(0, description="torch seed.")
    device: str = Field("auto", description="torch device: auto, cpu or cuda.")
    strategy: str = Field("ddp", description="Under torchrun: ddp or fsdp (FSDP2 fully_shard).")


class GatewaySettings(BaseModel):
    host: str = Field("127.0.0.1", description="Interface the MCP gateway binds to.")
    port: int = Field(8300, description="Port of the MCP gateway.")
    env_url: str = Field("http://127.0.0.1:8200", description="Base URL of our env servers (hosted under /<name>/mcp).")
    upstreams_file: str = Field(
        "",
        description='JSON file of third-party MCP servers: {"mcpServers": {NAME: {"command", "args", "env", "network"} | '
        '{"url", "headers"}}} (a stdio server runs sandboxed per rollout; "network": true keeps the host network for it).',
    )
    max_tool_calls: int = Field(
        200, description="Tool calls one rollout may make unless its budgets say otherwise; later calls get a tool error."
    )
    max_result_bytes: int = Field(
        256 * 1024, description="Tool results above this many bytes are cut (and recorded as truncated)."
    )
    env_secret: str = Field(
        "", description="Shared secret the gateway sends to the env servers (they accept no call without it)."
    )
    call_timeout_s: float = Field(60.0, description="Longest wait for one upstream tool call.")
    connect_timeout_s: float = Field(
        30.0, description="Longest wait for an upstream MCP server to start and list its tools (a cold stdio server)."
    )
    allowed_tools: list[str] = Field(default_factory=list, description="If set, only these (namespaced) tools are served.")
    idle_close_s: float = Field(900.0, description="Upstream connections of a rollout idle this long are closed.")
    reap_interval_s: float = Field(
        1.0, gt=0, description="How often the store is asked which rollouts ended (their MCP servers are then closed)."
    )
    rollouts_dir: str = Field(
        "", description="Where each rollout's stdio MCP servers get their working folder ({rollout_dir}); empty: a "
        "temporary folder removed when the gateway stops.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=lambda: ["127.0.0.1:*", "localhost:*"], description="Host headers accepted ('*' turns the check off)."
    )
    sandbox: bool = Field(
        True,
        description="Run each rollout's third-party stdio MCP servers in a bubblewrap sandbox of their own (host "
        "read-only, only the server's folder writable, no network unless its config says \"network\": true); where no "
        "sandbox can be made they are refused. Off runs them with the gateway's full access.",
    )
    bwrap_path: str = Field("bwrap", description="The bubblewrap binary the stdio MCP servers' sandbox uses.")
    runtime: Literal["local", "kubernetes"] = Field(
        "local",
        description="'kubernetes': the gateway starts no MCP server itself; it reaches a rollout-scoped server in "
        "the rollout's pod (asking the API for the pod's address) and a shared one at its Service.",
    )
    sidecar_secret: str = Field(
        "", description="On Kubernetes: the deployment's MCP sidecar secret (the orchestrator's mcp_sidecar_secret)."
    )
    sandbox_max_processes: int = Field(
        256, description="Most processes (threads included) of one sandboxed stdio MCP server (RLIMIT_NPROC; 0: none)."
    )
    sandbox_max_memory_mb: int = Field(
        4096, description="Data-segment limit of each process of a sandboxed stdio MCP server, MiB (RLIMIT_DATA; 0: none)."
    )
    sandbox_hidden: list[str] = Field(
        default_factory=list, description="Extra host folders a sandboxed stdio MCP server must not see (state folders)."
    )


class McpSettings(BaseModel):
    host: str = Field("127.0.0.1", description="Interface the env servers bind to.")
    port: int = Field(8200, description="Port of the env servers (all hosted under /<name>/mcp).")
    state_dir: str = Field("", description="Folder of per-rollout env state; empty means <home>/mcp_state.")
    state_ttl_s: float = Field(6 * 3600.0, description="A rollout's env state is removed this long after its last use.")
    max_payload_bytes: int = Field(1_000_000, description="Tool arguments and files above this size are refused.")
    env_secret: str = Field(
        "", description="Shared secret every HTTP call to the env servers must carry (set by the gateway); required."
    )
    workspace_quota_bytes: int = Field(20_000_000, description="Most bytes of files one rollout's workspace may hold.")
    sqldb_max_bytes: int = Field(50_000_000, description="Largest one rollout's sqldb database may grow.")
    sqldb_max_result_bytes: int = Field(1_000_000, description="Query results above this many bytes are cut.")
    allowed_hosts: list[str] = Field(
        default_factory=lambda: ["127.0.0.1:*", "localhost:*"], description="Host headers accepted ('*' turns the check off)."
    )
    stdio_rollout: str = Field("local", description="Rollout id a stdio server process serves.")
    stdio_task: str = Field("", description="Task (suite:task_id) whose initial state seeds the stdio rollout.")
    suites: list[str] = Field(
        default_factory=list, description="Suite JSON files (besides the shipped ones) whose tasks may seed rollouts."
    )
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ROLLWIRE_", env_nested_delimiter="__", extra="ignore")

    home: Path = Field(default_factory=default_home, description="Cache and default data folder.")
    log_level: str = Field("INFO", description="Logging level for CLI processes.")
    log_format: str = Field("text", description="Log line format of CLI processes: text, or json (one object per line).")
    store: StoreSettings = Field(default_factory=StoreSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    orchestrator: OrchestratorSettings = Field(default_factory=OrchestratorSettings)
    trainer: TrainerSettings = Field(default_factory=TrainerSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)

    def store_url(self) -> str:
        """The store URL, defaulting to a SQLite file in the home folder."""
        if self.store.url:
            return self.store.url
        return f"sqlite:///{self.home / 'rollwire.db'}"


__all__ = [
    "EngineSettings",
    "GatewaySettings",
    "KubernetesSettings",
    "McpSettings",
    "OrchestratorSettings",
    "ProxySettings",
    "Settings",
    "StoreSettings",
    "TrainerSettings",
    "default_home",
]
