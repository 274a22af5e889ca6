"""Load suites by name (a data file shipped in ``suites/``) or by path, and resolve ``suite:task_id`` references."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rollwire.errors import InvalidRequest, NotFound
from rollwire.mcp_servers.tasks.schema import Suite, Task

SUITES_DIR = Path(__file__).parent / "suites"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_LOADED: set[str] = set()
"""Suite files (resolved paths) this process has loaded: the only files a task reference may name."""


def suite_names() -> list[str]:
    """Names of the suites shipped with the package."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.json"))


def load_suite(name_or_path: str) -> Suite:
    """A suite by shipped name or by a JSON file path; clear errors for unknown names and malformed files."""
    path = Path(name_or_path)
    if not path.suffix:
        if not _NAME.match(name_or_path):
            raise InvalidRequest(f"suite name {name_or_path!r} must be letters, digits, '_' or '-'")
        path = SUITES_DIR / f"{name_or_path}.json"
    resolved = str(path.resolve())
    suite = _load(resolved)
    _LOADED.add(resolved)
    return suite


@lru_cache(maxsize=32)
def _load(path: str) -> Suite:
    file = Path(path)
    if not file.is_file():
        raise NotFound(f"no suite {file.stem!r} (shipped: {', '.join(suite_names())})")
    try:
        suite = Suite.model_validate(json.loads(file.read_text()))
    except (ValueError, ValidationError) as exc:
        raise InvalidRequest(f"suite file {file.name} is malformed: {str(exc).splitlines()[0]}") from None
    ids = [t.id for t in suite.tasks]
    if len(ids) != len(set(ids)):
        raise InvalidRequest(f"suite {suite.name!r} has duplicate task ids")
    _check_servers(suite, file.name)
    return suite


def _check_servers(suite: Suite, where: str) -> None:
    """Every server a task names is an env server or one the suite declares (a typo fails here, not as an empty
    tool list in some rollout later)."""
    from rollwire.mcp_servers.envs.app import SERVERS
    from rollwire.mcp_servers.server_config import parse_servers

    declared = parse_servers(suite.mcp_servers, f"suite file {where}")
    clash = sorted(set(declared) & set(SERVERS))
    if clash:
        raise InvalidRequest(f"suite file {where}: mcpServers may not redefine the env server(s) {', '.join(clash)}")
    known = {*SERVERS, *declared}
    for task in suite.tasks:
        unknown = [s for s in task.servers if s not in known]
        if unknown:
            raise InvalidRequest(
                f"suite file {where}: task {task.id!r} names unknown MCP server(s) {', '.join(map(repr, unknown))} "
                f"(known: {', '.join(sorted(known))}; declare third-party ones under \"mcpServers\")"
            )


def resolve_task(ref: str) -> Task:
    """The task of a ``suite:task_id`` reference."""
    suite_name, sep, task_id = ref.partition(":")
    if not sep or not task_id:
        raise InvalidRequest(f"task reference {ref!r} must look like suite:task_id")
    try:
        return load_suite(suite_name).task(task_id)
    except KeyError:
        raise NotFound(f"suite {suite_name!r} has no task {task_id!r}") from None


def loaded_task(ref: str) -> Task:
    """A task reference from outside (a header, a row): its suite must be shipped or already loaded by this
    process (``load_suite``, e.g. the env servers' ``--suite``), never an arbitrary file."""
    suite_name = ref.partition(":")[0]
    if not _NAME.match(suite_name) and str(Path(suite_name).resolve()) not in _LOADED:
        raise InvalidRequest(
            f"task reference {ref[:200]!r} names a suite this server has not loaded "
            "(start the env servers with ROLLWIRE_MCP__SUITES='[\"/abs/path/suite.json\"]')"
        )
    return resolve_task(ref)


def task_initial(ref: str) -> dict[str, Any]:
    """The initial state of a referenced task (what env servers seed a rollout from); loaded suites only."""
    return loaded_task(ref).initial_state


__all__ = ["SUITES_DIR", "load_suite", "loaded_task", "resolve_task", "suite_names", "task_initial"]
