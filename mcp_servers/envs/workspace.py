"""The workspace server: a per-rollout folder of text files, confined to that folder (no traversal, no symlinks out)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from rollwire.mcp_servers.envs.rollout import EnvRuntime

NAME = "workspace"
MAX_LIST = 500


def seed(folder: Path, initial: dict[str, Any]) -> None:
    """Create ``workspace/`` with the task's ``files`` ({path: text})."""
    root = folder / "workspace"
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in (initial.get("files") or {}).items():
        target = resolve(root, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(str(text))


def resolve(root: Path, rel: str) -> Path:
    """``rel`` inside ``root``, refusing absolute paths, '..' escapes and symlinks that lead outside."""
    if not isinstance(rel, str) or not rel.strip():
        raise ToolError("path must be a non-empty relative path")
    if "\x00" in rel or Path(rel).is_absolute():
        raise ToolError(f"path {rel!r} must be relative to the workspace")
    base = root.resolve()
    target = (root / rel).resolve()
    if target != base and base not in target.parents:
        raise ToolError(f"path {rel!r} is outside the workspace")
    return target


def used_bytes(root: Path) -> int:
    """Bytes of the files in a workspace (what its quota counts)."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def build(env: EnvRuntime) -> MCPServer:
    """The workspace MCP server."""
    mcp = MCPServer(NAME, instructions="Files of your workspace. Paths are relative to the workspace root.")

    def root_of(ctx: Context[Any, Any]) -> Path:
        return env.folder(ctx, NAME, seed) / "workspace"

    @mcp.tool()
    def list_files(ctx: Context[Any, Any], path: str = ".") -> str:
        """List the files under a folder of the workspace (recursively), one path per line."""
        root = root_of(ctx)
        folder = resolve(root, path)
        if not folder.is_dir():
            raise ToolError(f"{path!r} is not a folder")
        base = root.resolve()
        names = sorted(str(p.relative_to(base)) for p in folder.rglob("*") if p.is_file())
        return "\n".join(names[:MAX_LIST]) or "(empty)"

    @mcp.tool()
    def read_file(ctx: Context[Any, Any], path: str) -> str:
        """Read a text file of the workspace."""
        target = resolve(root_of(ctx), path)
        if not target.is_file():
            raise ToolError(f"no file {path!r}")
        if target.stat().st_size > env.max_payload_bytes:
            raise ToolError(f"{path!r} is larger than {env.max_payload_bytes} bytes")
        return target.read_text(errors="replace")

    @mcp.tool()
    def write_file(ctx: Context[Any, Any], path: str, content: str) -> str:
        """Create or replace a text file of the workspace (parent folders are created)."""
        env.check_size("content", content)
        root = root_of(ctx)
        target = resolve(root, path)
        if target.is_dir():
            raise ToolError(f"{path!r} is a folder")
        size = len(content.encode())
        used = used_bytes(root) - (target.stat().st_size if target.is_file() else 0)
        if used + size > env.workspace_quota_bytes:
            raise ToolError(
                f"the workspace quota is {env.workspace_quota_bytes} bytes; {used} are used and this file needs {size}"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        return f"wrote {len(content.encode())} bytes to {path}"

    @mcp.tool()
    def delete_file(ctx: Context[Any, Any], path: str) -> str:
        """Delete a file of the workspace."""
        target = resolve(root_of(ctx), path)
        if not target.is_file():
            raise ToolError(f"no file {path!r}")
        target.unlink()
        return f"deleted {path}"

    return mcp


__all__ = ["NAME", "build", "resolve", "seed", "used_bytes"]
