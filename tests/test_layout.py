"""The layout holds: rooms import only rooms below them, and no module imports in a circle.

Every import counts, at module level, inside functions and under ``TYPE_CHECKING`` alike:
a lower room that needs a higher one's type gets a protocol of its own instead
(`runtime.world.recorder.Recorder`, `runtime.lane.backend.SupportsToolLookup`).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FOUNDATION = {"_version", "errors", "clock", "cancel", "wake", "process"}
# Lowest first: a room may import the foundation and the rooms before it, never after.
ROOMS = [
    "lane",
    "hub",
    "tools",
    "models",
    "world",
    "cluster",
    "scenario",
    "journal",
    "telemetry",
    "control",
    "cli",
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / "runtime").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(path: Path, module: str, *, top_level_only: bool = False) -> set[str]:
    """The runtime modules ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base == "runtime" or base.startswith("runtime."):
                out.add(base)
                out.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("runtime"))
    return out


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_runtime_root_holds_only_the_foundation_and_the_rooms() -> None:
    root = ROOT / "runtime"
    files = {p.stem for p in root.glob("*.py")} - {"__init__"}
    dirs = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert files == FOUNDATION
    assert dirs == set(ROOMS)


def test_no_room_imports_a_room_above_it() -> None:
    rank = {name: i for i, name in enumerate(ROOMS)}
    modules = _modules()
    wrong = []
    for module, path in modules.items():
        if module == "runtime":
            continue  # the front door imports everything
        mine = _room(module)
        for imported in _imports(path, module):
            theirs = _room(imported)
            if imported not in modules or theirs in FOUNDATION or theirs == mine:
                continue
            if mine in FOUNDATION:
                wrong.append(f"{module} (foundation) imports {imported}")
            elif rank[theirs] > rank[mine]:
                wrong.append(f"{module} ({mine}) imports {imported} ({theirs})")
    assert wrong == []


def test_no_module_imports_itself_in_a_circle() -> None:
    modules = _modules()
    graph = {
        m: {i for i in _imports(p, m) if i in modules and i != m and not m.startswith(i + ".")}
        for m, p in modules.items()
    }
    # A package's __init__ re-exports its modules; a module importing its own package's
    # front door would close a circle, which the rule above does not catch within a room.
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_every_package_imports_on_its_own_in_a_fresh_process() -> None:
    import subprocess
    import sys

    for first in ("systems", "components", "runtime.world.state", "runtime.cli"):
        done = subprocess.run(
            [sys.executable, "-c", f"import {first}"],
            cwd=ROOT,
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"import {first}: {done.stderr}"
