"""The package layers hold: the core (store, rollouts, settings, errors, trajectory, ...) imports nothing above
it; the components (engine, proxy, MCP servers, orchestrator, trainer, harness adapters) import nothing of the
application layer (CLI, demo, local stack); the services that meet only over HTTP and the store (engine, proxy,
gateway, trainer) import nothing of one another; and no two units import each other, directly or round a cycle.
A unit is a component, or one subpackage of a component that has them (the gateway, the env servers, the task
suites, the runtimes), so a cycle inside ``mcp_servers`` or ``orchestrator`` shows too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINKS = {link.name: link.readlink().name for link in (ROOT / "rollwire").iterdir() if link.is_symlink()}
"""rollwire/'s links to the top-level folders (``proxy -> ../proxy``): each folder is the package rollwire.<link>."""
FOLDERS = {"rollwire": "rollwire"} | {folder: f"rollwire.{name}" for name, folder in LINKS.items()}
APPLICATION = ("rollwire.app",)
COMPONENTS = {name for name in FOLDERS.values() if name != "rollwire"} - set(APPLICATION)
SUBPACKAGES = {
    f"rollwire.{folder}.{path.parent.name}"
    for folder in ("mcp_servers", "orchestrator")
    for path in (ROOT / folder).glob("*/__init__.py")
}
"""The parts of the components made of parts (``rollwire.mcp_servers.gateway``, ``rollwire.orchestrator.runtimes``,
...): each is a unit of its own."""
SERVICES = ("rollwire.engine", "rollwire.proxy", "rollwire.mcp_servers.gateway", "rollwire.trainer")
"""What runs as its own process and meets the others over HTTP and the store only."""


def _unit(module: str) -> str:
    """The unit a module belongs to for layering: a component's subpackage, a component, an application module,
    or the core."""
    for app in APPLICATION:
        if module == app or module.startswith(app + "."):
            return app
    for unit in sorted(SUBPACKAGES | COMPONENTS, key=len, reverse=True):
        if module == unit or module.startswith(unit + "."):
            return unit
    return "core"


def _service(unit: str) -> str | None:
    return next((s for s in SERVICES if unit == s or unit.startswith(s + ".")), None)


def _imports() -> dict[str, set[tuple[str, str]]]:
    """unit -> {(importing file, imported module)} for every rollwire import in the source (incl. lazy ones)."""
    found: dict[str, set[tuple[str, str]]] = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            module = ".".join([package, *rel.parts]).removesuffix(".__init__")
            if folder == "rollwire" and rel.parts[0] in LINKS:
                continue  # a linked folder's files, read once under their own folder
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                for name in names:
                    if name.startswith("rollwire"):
                        found.setdefault(_unit(module), set()).add((str(path.relative_to(ROOT)), name))
    return found


def test_the_core_imports_nothing_above_it() -> None:
    above = sorted((where, name) for where, name in _imports().get("core", set()) if _unit(name) != "core")
    assert above == []


def test_components_do_not_import_the_application_layer() -> None:
    wrong = sorted(
        (where, name)
        for unit, pairs in _imports().items()
        if unit in COMPONENTS | SUBPACKAGES
        for where, name in pairs
        if _unit(name) in APPLICATION
    )
    assert wrong == []


def test_the_services_import_nothing_of_one_another() -> None:
    crossing = sorted(
        (where, name)
        for unit, pairs in _imports().items()
        for where, name in pairs
        if _service(unit) and _service(_unit(name)) and _service(unit) != _service(_unit(name))
    )
    assert crossing == []


def test_no_import_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for unit, pairs in _imports().items():
        graph.setdefault(unit, set()).update(_unit(name) for _, name in pairs if _unit(name) != unit)

    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    return [*path, nxt]
                if nxt not in path:
                    stack.append((nxt, [*path, nxt]))
        return None

    cycles = [c for c in (cycle_from(unit) for unit in graph) if c]
    assert cycles == [], [(c, [pair for pair in _imports()[c[0]] if _unit(pair[1]) == c[1]]) for c in cycles]
