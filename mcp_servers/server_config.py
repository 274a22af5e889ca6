"""The MCP servers a deployment names, in the common ``{"mcpServers": {NAME: ...}}`` format (what Claude Code,
Cursor and others write): the gateway's third-party upstreams (``rollwire up --mcp-config``) and a suite's own
servers are read here. How each is reached: ours over HTTP with the rollout's identity, third-party ones over
stdio or HTTP; and made per rollout: a stdio server runs in the rollout's own folder with ``{rollout_id}`` /
``{rollout_dir}`` filled in its args and env (sandboxed there: the gateway's ``stdio_sandbox``; ``"network":
true`` keeps the host's network for it), an HTTP one gets the rollout's identity in a header."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rollwire.errors import InvalidRequest
from rollwire.mcp_servers.placement import Placement, Scope, check_names
from rollwire.mcp_servers.state import ROLLOUT_HEADER, SECRET_HEADER, TASK_HEADER

PLACEHOLDERS = ("rollout_id", "rollout_dir", "task")
"""What ``{...}`` may name in a server's args, env, url and headers; each is filled per rollout."""
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]+)\}")
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class RolloutVars:
    """The values a rollout's servers are started with."""

    rollout_id: str
    rollout_dir: str
    task: str = ""

    def fill(self, text: str) -> str:
        values = {"rollout_id": self.rollout_id, "rollout_dir": self.rollout_dir, "task": self.task}
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def _check_placeholders(name: str, texts: list[str]) -> None:
    for text in texts:
        for found in _PLACEHOLDER.findall(text):
            if found not in PLACEHOLDERS:
                known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
                raise InvalidRequest(f"MCP server {name!r}: unknown placeholder {{{found}}} in {text!r} (known: {known})")


@dataclass(frozen=True)
class UpstreamSpec:
    """How to reach one MCP server: ``url`` (streamable HTTP) or ``command`` + ``args`` (stdio)."""

    name: str
    url: str = ""
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    forward_identity: bool = False
    """Our env servers: the rollout and task headers plus the shared secret."""
    secret: str = ""
    """Sent to our env servers (with the identity) so they know the call comes from the gateway."""
    network: bool = False
    """A stdio server keeps the host's network in its sandbox (its config's ``"network": true``); else it has none."""
    placement: Placement | None = None
    """Where it runs on a cluster (the entry's cluster keys; ``cluster``)."""
    in_rollout_pod: bool = False
    """On a cluster: a rollout-scoped server, reached in each rollout's own pod (its url is found per rollout)."""
    proof_key: str = ""
    """A bridged server's key: the gateway asks it to prove it holds it (``placement.proof``) on every request."""

    @classmethod
    def from_dict(cls, name: str, raw: Any) -> UpstreamSpec:
        """One entry of an ``mcpServers`` map: ``{"command", "args", "env", "network"}`` or ``{"url", "headers"}``."""
        if not isinstance(raw, dict):
            raise InvalidRequest(f"MCP server {name!r} must be an object with 'command' or 'url'")
        if bool(raw.get("url")) == bool(raw.get("command")):
            raise InvalidRequest(f"MCP server {name!r} needs exactly one of 'url' or 'command'")
        args, env, headers = raw.get("args") or [], raw.get("env") or {}, raw.get("headers") or {}
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise InvalidRequest(f"MCP server {name!r}: 'args' must be a list of strings")
        for field_name, mapping in (("env", env), ("headers", headers)):
            if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
                raise InvalidRequest(f"MCP server {name!r}: {field_name!r} must map names to strings")
        if not isinstance(raw.get("network", False), bool):
            raise InvalidRequest(f"MCP server {name!r}: 'network' must be true or false")
        url, command = str(raw.get("url") or ""), str(raw.get("command") or "")
        _check_placeholders(name, [url, *args, *env.values(), *headers.values()])
        return cls(
            name, url, command, tuple(args), tuple(sorted(env.items())), tuple(sorted(headers.items())),
            bool(raw.get("forward_identity", False)), network=bool(raw.get("network", False)),
            placement=Placement.from_dict(name, raw),
        )  # fmt: skip

    @property
    def cluster(self) -> Placement:
        """Where it runs on a cluster: its entry's keys, else per rollout for a stdio server, else where its url is."""
        return self.placement or Placement(Scope.ROLLOUT if self.command else Scope.REMOTE)

    def for_rollout(self, rollout: RolloutVars) -> UpstreamSpec:
        """This server as one rollout starts it: its placeholders filled."""
        return replace(
            self,
            url=rollout.fill(self.url),
            args=tuple(rollout.fill(a) for a in self.args),
            env=tuple((k, rollout.fill(v)) for k, v in self.env),
            headers=tuple((k, rollout.fill(v)) for k, v in self.headers),
        )

    def http_headers(self, rollout_id: str, task_ref: str | None) -> dict[str, str]:
        """Every HTTP upstream learns which rollout calls (servers that keep state per rollout key it on this);
        ours also get the task and the shared secret."""
        headers = {**dict(self.headers), ROLLOUT_HEADER: rollout_id}
        if self.forward_identity and task_ref:
            headers[TASK_HEADER] = task_ref
        if self.secret:
            headers[SECRET_HEADER] = self.secret
        return headers


def parse_servers(raw: Any, where: str) -> dict[str, UpstreamSpec]:
    """Servers from ``{"mcpServers": {NAME: ...}}`` (what Claude Code, Cursor and others write), or the bare map."""
    if isinstance(raw, dict) and "mcpServers" in raw:
        raw = raw["mcpServers"]
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{where}: expected {{\"mcpServers\": {{NAME: {{\"command\"|\"url\": ...}}}}}}")
    for name in raw:
        if not _SAFE_ID.match(str(name)):
            raise InvalidRequest(f"{where}: MCP server name {name!r} must be letters, digits, '.', '_' or '-'")
    check_names(list(raw))
    return {name: UpstreamSpec.from_dict(name, spec) for name, spec in raw.items()}


def load_upstreams(path: str) -> dict[str, UpstreamSpec]:
    """Extra upstreams from a JSON file in the common ``mcpServers`` format."""
    return load_config(path)[1] if path else {}


def load_config(path: str) -> tuple[str, dict[str, UpstreamSpec]]:
    """The file as written (what a cluster's ConfigMap holds) and its servers; one readable line if it is bad."""
    try:
        text = Path(path).read_text()
        raw = json.loads(text)
    except (OSError, ValueError) as exc:
        raise InvalidRequest(f"cannot read MCP config {path}: {exc}") from None
    return text, parse_servers(raw, f"MCP config {path}")


def rollout_folder(root: Path, rollout_id: str, server: str) -> Path:
    """``<root>/<rollout>/<server>``: the working folder of one rollout's stdio server (made on first use)."""
    if not _SAFE_ID.match(rollout_id) or not _SAFE_ID.match(server):
        raise InvalidRequest(f"rollout id {rollout_id[:80]!r} cannot name a folder")
    folder = root / rollout_id / server
    folder.mkdir(parents=True, exist_ok=True)
    return folder


__all__ = [
    "PLACEHOLDERS",
    "RolloutVars",
    "UpstreamSpec",
    "load_config",
    "load_upstreams",
    "parse_servers",
    "rollout_folder",
]
