"""The local stack: engine, MCP env servers, gateway and proxy as child processes on loopback ports.

``rollwire up`` and ``rollwire demo`` start it; ``rollwire rollouts`` and ``rollwire run-harness`` find a
running one through the stack file (``StackInfo.save``). Each part runs as its own ``rollwire`` process,
exactly as a user would start it by hand, because on a small machine one process per part keeps the
engine's torch work off the proxy's and the gateway's event loops. With ``upstream`` set (a vLLM server)
no engine is started and the proxy points there instead; with ``engine="vllm"`` the engine part is vLLM's
CPU build from the venv ``rollwire.app.vllm_runtime`` manages (installed on first use).

The proxy gets two sockets: its main one, the only address of it rollouts are given (``StackInfo.proxy_url``),
and its admin listener (``StackInfo.admin_url``: the operator API, the viewer, /metrics). Secrets (the operator
key, the env servers' secret, the store URL, which may hold a password) reach each part through its environment,
never its command line, which every local user can read (``/proc/<pid>/cmdline``, ``ps``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType

import httpx

from rollwire.app.serving import EXIT_WITH_PARENT, listening_socket
from rollwire.errors import InvalidRequest, NotFound, RollwireError
from rollwire.settings import Settings

ENGINES = ("bundled", "vllm")
"""What serves the model when no --upstream is given: rollwire's bundled engine or vLLM's CPU build."""
VLLM_START_TIMEOUT_S = 900.0
"""vLLM compiles its model at start (about 70 s alone, minutes on a loaded two-core machine)."""
TINY_SERVED_NAME = "rollwire-tiny"
"""The name the bundled engine serves the tiny default model under, in the local stack."""


def stack_file(home: Path) -> Path:
    """Where ``rollwire up`` writes the running stack's addresses: ``<home>/stack.json``.

    A function of the home folder, not a constant: ``ROLLWIRE_HOME`` moves it, and warm-pool children
    (forked from a process that imported this module) must not inherit an import-time path.
    """
    return Path(home) / "stack.json"


@dataclass(slots=True)
class StackInfo:
    """Where each part of a running stack listens, and what a client needs to use it (the key is secret)."""

    proxy_url: str
    """The proxy's main listener: what rollouts are pointed at."""
    gateway_url: str
    env_url: str
    engine_url: str | None
    operator_key: str
    db_url: str
    state_root: str
    model: str
    pids: dict[str, int] = field(default_factory=dict)
    admin_url: str = field(default="", kw_only=True)
    """The proxy's admin listener (/admin/v1, /ui, /metrics), never handed to a rollout; empty when not known
    (a stack named by its URLs)."""

    def save(self, path: Path) -> Path:
        """Write the stack file (owner-readable only: it holds the operator key)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(".tmp")
        staging.write_text(json.dumps(asdict(self), indent=2))
        staging.chmod(0o600)
        staging.replace(path)
        return path

    @classmethod
    def load(cls, path: Path) -> StackInfo:
        """Read a stack file; a missing or foreign file is a NotFound with what to do about it."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
            return cls(**data)
        except FileNotFoundError:
            raise NotFound(f"no running stack: {path} does not exist (start one with `rollwire up`)") from None
        except (json.JSONDecodeError, TypeError) as exc:
            raise NotFound(f"{path} is not a rollwire stack file ({exc})") from None

    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.operator_key}"}

    def viewer_url(self, fragment: str = "") -> str:
        """The trace viewer's login link (it holds the operator key); empty without an admin listener."""
        if not self.admin_url:
            return ""
        key = f"?key={self.operator_key}" if self.operator_key else ""
        return f"{self.admin_url.rstrip('/')}/ui/{key}{fragment}"


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (another process may still take it before the child binds it: where the
    child can take a socket, bind with ``listening_socket`` and hand that down instead)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(slots=True)
class _Child:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    group: bool = False
    """Started as its own process group (vLLM: its API server and engine-core worker stop together)."""

    def signal(self, signum: int) -> None:
        if self.group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signum)
        else:
            self.process.send_signal(signum)


class LocalStack:
    """``with LocalStack(settings) as info:`` starts the parts, waits until each answers /health, stops them after.

    Logs go to ``<log_dir>/<part>.log``; a part that dies or does not come up raises with its log's tail.
    """

    PARTS = ("engine", "env", "gateway", "proxy", "admin")
    """What gets a socket: each part, and the proxy's admin listener (``admin``)."""
    SECRETS = {
        "ROLLWIRE_PROXY__OPERATOR_KEY": ("proxy",),
        "ROLLWIRE_TRAINER__OPERATOR_KEY": (),
        "ROLLWIRE_MCP__ENV_SECRET": ("env", "gateway"),
        "ROLLWIRE_MCP__GATEWAY__ENV_SECRET": ("env", "gateway"),
        "ROLLWIRE_STORE__URL": ("proxy", "gateway"),
    }
    """Environment variables that hold a secret -> the parts that get them (a name starting with ``proxy`` is a
    proxy): no part inherits another's secret from this process's environment."""

    def __init__(
        self,
        settings: Settings,
        *,
        upstream: str | None = None,
        model: str | None = None,
        served_model_name: str | None = None,
        db_url: str | None = None,
        state_dir: Path | None = None,
        log_dir: Path | None = None,
        host: str = "127.0.0.1",
        ports: dict[str, int] | None = None,
        engine_args: Sequence[str] = (),
        proxy_args: Sequence[str] = (),
        proxy_env: Mapping[str, str] | None = None,
        start_timeout_s: float = 180.0,
        engine: str = "bundled",
        mcp_config: Path | None = None,
    ) -> None:
        if engine not in ENGINES:
            raise InvalidRequest(f"unknown engine {engine!r} ({', '.join(ENGINES)})", param="engine")
        self.engine = engine
        self.mcp_config = mcp_config
        """Third-party MCP servers for the gateway (``{"mcpServers": ...}``)."""
        self.settings = settings
        self.upstream = upstream.rstrip("/") if upstream else None
        self.model = model
        self.served_model_name = served_model_name or (None if upstream or model else TINY_SERVED_NAME)
        self.db_url = db_url or settings.store_url()
        self.state_dir = Path(state_dir) if state_dir else settings.home / "mcp_state"
        self.log_dir = Path(log_dir) if log_dir else settings.home / "stack" / "logs"
        self.host = host
        self.ports = dict(ports or {})
        self.engine_args, self.proxy_args = list(engine_args), list(proxy_args)
        self.proxy_env = dict(proxy_env or {})
        self.start_timeout_s = start_timeout_s
        self.operator_key = settings.proxy.operator_key or secrets.token_urlsafe(24)
        self.env_secret = settings.mcp.env_secret or secrets.token_urlsafe(24)
        """Shared by the env servers and the gateway only (through their environment, never argv)."""
        self._children: list[_Child] = []
        self.info: StackInfo | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> StackInfo:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.upstream is None:
            from rollwire.model_names import resolve_model

            folder = resolve_model(self.model, self.settings.home)  # built once here, not raced by the engine process
            self.model = str(folder) if self.model else self.model
        # Each part's socket is bound here and handed down (--fd): distinct ports, none taken while a part starts.
        socks = self._bind_parts()
        url = {part: f"http://{self.host}:{sock.getsockname()[1]}" for part, sock in socks.items()}
        engine_url = self.upstream or url["engine"]
        try:
            if self.upstream is None and self.engine == "vllm":
                socks.pop("engine").close()  # vLLM binds its own port (the window is its to lose)
                self._spawn_vllm(url["engine"])
            elif self.upstream is None:
                argv = ["engine", *self._engine_flags(), *self.engine_args]
                self._spawn("engine", url["engine"], argv, sock=socks.pop("engine"))
            self._spawn(
                "env", url["env"], ["mcp", "serve", "all", "--state-dir", str(self.state_dir)], sock=socks.pop("env")
            )
            mcp_config = ["--mcp-config", str(self.mcp_config)] if self.mcp_config else []
            argv = ["mcp", "gateway", "--env-url", url["env"], *mcp_config]
            self._spawn("gateway", url["gateway"], argv, sock=socks.pop("gateway"))
            self._spawn_proxy("proxy", url["proxy"], engine_url, url["gateway"], socks.pop("proxy"), socks.pop("admin"))
            for child in self._children:
                self._wait_healthy(child)
            if self.upstream is not None:
                self._wait_upstream(engine_url)
            served = self.served_model_name or self._served_name(engine_url)
        except BaseException:
            self.stop()
            raise
        finally:
            for sock in socks.values():  # the ones not handed to a part (an --upstream stack's engine)
                sock.close()
        self.info = StackInfo(
            proxy_url=url["proxy"],
            admin_url=url["admin"],
            gateway_url=url["gateway"],
            env_url=url["env"],
            engine_url=engine_url,
            operator_key=self.operator_key,
            db_url=self.db_url,
            state_root=str(self.state_dir),
            model=served,
            pids={child.name: child.process.pid for child in self._children},
        )
        return self.info

    def stop(self) -> None:
        """Stop every part (proxy first, engine last): SIGTERM, then SIGKILL after a grace period."""
        for child in reversed(self._children):
            if child.process.poll() is None:
                child.signal(signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        for child in reversed(self._children):
            try:
                child.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.signal(signal.SIGKILL)
                child.process.wait()
            if child.group:  # the worker may outlive its API server by a moment
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGKILL)
        self._children.clear()

    def add_proxy(self, name: str, upstream: str) -> str:
        """Start one more proxy on the same store and gateway in front of another upstream; returns its main URL
        (its admin listener takes a free port: nothing needs it, the store is shared)."""
        if self.info is None:
            raise RollwireError("start the stack before adding a proxy")
        sock = listening_socket(self.host, 0)
        try:
            admin = listening_socket(self.host, 0)
        except BaseException:
            sock.close()
            raise
        url = f"http://{self.host}:{sock.getsockname()[1]}"
        self._spawn_proxy(name, url, upstream, self.info.gateway_url, sock, admin)
        self._wait_healthy(self._children[-1])
        return url

    def check_alive(self) -> None:
        """Raise, with its log tail, if a part has exited while the stack should be running."""
        for child in self._children:
            if child.process.poll() is not None:
                raise RollwireError(
                    f"the {child.name} exited with status {child.process.returncode}: {_tail(child.log)}"
                )

    def failed_part(self) -> str | None:
        """Which part has exited while the stack should be running (None: all are up): the platform's own
        evidence that rollouts running now did not get a fair run."""
        for child in self._children:
            if child.process.poll() is not None:
                return f"the {child.name} exited with status {child.process.returncode}"
        return None

    def __enter__(self) -> StackInfo:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- parts -----------------------------------------------------------------------------------------------

    def _bind_parts(self) -> dict[str, socket.socket]:
        """A listening socket per part, on its fixed port or an ephemeral one; none left open if one fails."""
        socks: dict[str, socket.socket] = {}
        try:
            for part in self.PARTS:
                socks[part] = listening_socket(self.host, self.ports.get(part, 0))
        except BaseException:
            for sock in socks.values():
                sock.close()
            raise
        return socks

    def _engine_flags(self) -> list[str]:
        flags = []
        if self.model:
            flags += ["--model", self.model]
        if self.served_model_name:
            flags += ["--served-model-name", self.served_model_name]
        return flags

    def _spawn_vllm(self, url: str) -> None:
        """vLLM's server from the managed venv (installed here on first use, with pip's progress shown)."""
        from rollwire.app.vllm_runtime import ensure_python, serve_command, serve_env
        from rollwire.model_names import resolve_model

        python = ensure_python(self.settings.home)
        model = str(resolve_model(self.model, self.settings.home))
        host, port = url.rsplit(":", 1)
        argv = serve_command(python, model=model, host=host.split("//", 1)[1], port=int(port),
                             served_model_name=self.served_model_name or "", extra=self.engine_args)  # fmt: skip
        self._spawn("engine", url, argv, command=argv, env=serve_env(self._child_env("engine")), group=True)

    def _spawn_proxy(
        self, name: str, url: str, upstream: str, gateway_url: str, sock: socket.socket, admin: socket.socket
    ) -> None:
        """A proxy serving rollouts on ``sock`` and its admin listener on ``admin`` (both inherited)."""
        admin_port = str(admin.getsockname()[1])
        model = ["--model", self.model] if self.model else []  # its tokenizer and template are the served model's
        argv = ["proxy", "--upstream", upstream, "--gateway-url", gateway_url, *model, *self.proxy_args,
                "--admin-port", admin_port, "--admin-fd", str(admin.fileno())]  # fmt: skip
        try:
            self._spawn(name, url, argv, sock=sock, keep=(admin,))
        finally:
            admin.close()

    def _child_env(self, name: str) -> dict[str, str]:
        """A part's environment: this process's, less the secrets the part has no use for, plus its own."""
        part = "proxy" if name.startswith("proxy") else name
        env = {k: v for k, v in os.environ.items() if part in self.SECRETS.get(k, (part,))}
        env["ROLLWIRE_HOME"] = str(self.settings.home)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env[EXIT_WITH_PARENT] = str(os.getpid())  # a part outlives no killed owner (vLLM, not ours: ``stop`` ends it)
        if part in ("proxy", "gateway"):
            env["ROLLWIRE_STORE__URL"] = self.db_url
        if part in ("env", "gateway"):
            env["ROLLWIRE_MCP__ENV_SECRET"] = env["ROLLWIRE_MCP__GATEWAY__ENV_SECRET"] = self.env_secret
        if name == "env" and self.settings.mcp.suites:  # suite files (besides the shipped ones) tasks may seed from
            env["ROLLWIRE_MCP__SUITES"] = json.dumps([str(Path(s).resolve()) for s in self.settings.mcp.suites])
        if part == "proxy":
            if "ROLLWIRE_PROXY__MODEL_ALIASES" not in env and self.served_model_name:
                # One served model: every requested name (a harness's own default, "default") means it.
                env["ROLLWIRE_PROXY__MODEL_ALIASES"] = json.dumps({"*": self.served_model_name})
            env.update(self.proxy_env)
            env["ROLLWIRE_PROXY__OPERATOR_KEY"] = self.operator_key  # StackInfo's key, whatever proxy_env says
        return env

    def _spawn(
        self, name: str, url: str, argv: list[str], command: list[str] | None = None,
        env: dict[str, str] | None = None, group: bool = False, sock: socket.socket | None = None,
        keep: Sequence[socket.socket] = (),
    ) -> None:  # fmt: skip
        """Start one part; ``command`` replaces the default ``rollwire <argv> --host --port [--fd]`` line.

        With ``sock`` the part serves on that socket (inherited as ``--fd``); this process closes its copy.
        ``keep``: more sockets the part inherits (named in ``argv``); the caller closes those.
        """
        port = url.rsplit(":", 1)[1]
        fds = (sock.fileno(),) if sock is not None else ()
        command = command or [
            sys.executable, "-m", "rollwire.app.cli", "--log-level", "WARNING", "--log-format", self.settings.log_format,
            *argv, "--host", self.host, "--port", port, *(["--fd", str(fds[0])] if fds else []),
        ]  # fmt: skip
        log = self.log_dir / f"{name}.log"
        try:
            descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # a part may log a rollout's token
            os.fchmod(descriptor, 0o600)  # a log an older stack left may be wider
            with open(descriptor, "wb") as out:
                process = subprocess.Popen(
                    command, stdout=out, stderr=subprocess.STDOUT, env=env or self._child_env(name),
                    start_new_session=group, pass_fds=(*fds, *(s.fileno() for s in keep)),
                )  # fmt: skip
        finally:
            if sock is not None:
                sock.close()
        self._children.append(_Child(name, url, process, log, group))

    def _wait_healthy(self, child: _Child) -> None:
        limit = self.start_timeout_s
        if self.engine == "vllm" and child.name == "engine":
            limit = max(limit, VLLM_START_TIMEOUT_S)
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if child.process.poll() is not None:
                raise RollwireError(
                    f"the {child.name} exited with status {child.process.returncode}: {_tail(child.log)}"
                )
            try:
                if httpx.get(f"{child.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RollwireError(f"the {child.name} did not answer {child.url}/health in {limit:.0f}s: {_tail(child.log)}")

    def _wait_upstream(self, url: str) -> None:
        try:
            httpx.get(f"{url}/v1/models", timeout=10.0).raise_for_status()
        except httpx.HTTPError as exc:
            raise RollwireError(f"the upstream at {url} does not answer /v1/models: {exc}") from None

    @staticmethod
    def _served_name(url: str) -> str:
        models = httpx.get(f"{url}/v1/models", timeout=10.0).json().get("data") or [{}]
        return str(models[0].get("id") or "default")


def _tail(log: Path, lines: int = 12) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return "(no log)"
    return " | ".join(text[-lines:]) or f"(empty log {log})"


__all__ = ["ENGINES", "TINY_SERVED_NAME", "LocalStack", "StackInfo", "free_port", "stack_file"]
