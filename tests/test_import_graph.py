"""The import graph of ``mellea_local``: no cycles, and no stage imports a stage after it.

Every ``import`` statement counts, at module level and inside functions (a late import dodges
the interpreter's cycle error, not the coupling); imports under ``if TYPE_CHECKING:`` do not
(annotations only). The stage order below is the one ARCHITECTURE.md documents: a module may
import its own stage and the stages before it. The root package ``mellea_local/__init__.py``
re-exports the public API, so it is exempt from the order (it must import later stages), not
from the cycle check.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mellea_local"

STAGES: tuple[str, ...] = (
    "errors", "options", "model_ids",            # no dependencies but errors
    "extras", "datasets", "threads",             # optional extras, shipped data, threads
    "core",                                      # the peer's core types and Backend
    "inputs",                                    # argument checks shared by public entries
    "messages", "rendering", "parsing",          # chat turns -> token ids -> model text back
    "tools",                                     # tool definitions and their schemas
    "adapters",                                  # io.yaml, library layout, AdapterRunner, kinds
    "embedded",                                  # the offline tiny model and its check families
    "intrinsics",                                # Intrinsic objects over an AdapterRunner
    "requirements", "sampling", "react",         # verdicts, instruct/repair, the agent loop
    "models",                                    # GGUF conversion, model cache and registry
    "backends",                                  # concrete backends (LocalHFBackend)
    "session",                                   # start_session(): the peer's entry point
    "<root>",                                    # mellea_local/__init__.py, the public API
    "launch",                                    # a backend from command-line arguments
    "training",                                  # train requirement-check adapters
    "batch",                                     # checks over datasets: local and Ray engines
    "bench",                                     # the benchmark suite
    "cli", "__main__",                           # the command line
)


def module_name(path: Path, root: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def stage_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return hidden


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports (module level and late imports alike)."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in files.items():
        tree = ast.parse(path.read_text("utf-8"), str(path))
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        hidden = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                targets = [target] + [f"{target}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[module].update(t for t in targets if t in files and t != module)
    for module in files:
        graph.setdefault(module, set())
    return dict(graph)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def backward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a later stage, as ``importer (stage) -> imported (stage)``."""
    rank = {stage: i for i, stage in enumerate(STAGES)}
    bad = []
    for module, targets in sorted(graph.items()):
        source = stage_of(module)
        if source == "<root>":
            continue
        for target in sorted(targets):
            if rank[stage_of(target)] > rank[source]:
                bad.append(f"{module} ({source}) -> {target} ({stage_of(target)})")
    return bad


def test_every_stage_is_in_the_documented_order():
    graph = import_graph(PACKAGE)
    assert {stage_of(m) for m in graph} <= set(STAGES)
    architecture = (PACKAGE.parent / "ARCHITECTURE.md").read_text("utf-8")
    [line] = [ln for ln in architecture.splitlines() if ln.startswith("Import order: ")]
    documented = [name.strip(" `.") for name in line.removeprefix("Import order: ").split("<")]
    assert documented == [s for s in STAGES if s not in ("<root>", "__main__")]


def test_no_import_cycle_in_the_package():
    assert cycles(import_graph(PACKAGE)) == []


def test_no_stage_imports_a_later_stage():
    assert backward_imports(import_graph(PACKAGE)) == []


def test_core_imports_nothing_but_core_and_errors():
    graph = import_graph(PACKAGE)
    for module, targets in graph.items():
        if stage_of(module) == "core":
            assert {stage_of(t) for t in targets} <= {"core", "errors"}, module


def test_bench_does_not_import_the_cli():
    graph = import_graph(PACKAGE)
    assert not [(m, t) for m, ts in graph.items() if stage_of(m) == "bench"
                for t in ts if stage_of(t) == "cli"]


# The checker itself, on small packages written for the purpose: it must see what it claims to.

def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "mellea_local"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checker_sees_a_late_import_cycle_and_ignores_type_checking(tmp_path):
    root = _package(tmp_path, {
        "core/__init__.py": "",
        "core/a.py": "from mellea_local.core.b import B\n",
        "core/b.py": "def f():\n    from mellea_local.core import a\n",
        "core/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from mellea_local.core.a import B\n",
        "core/d.py": "from .c import x\n",
    })
    graph = import_graph(root)
    assert cycles(graph) == [["mellea_local.core.a", "mellea_local.core.b"]]
    assert graph["mellea_local.core.c"] == set()
    assert graph["mellea_local.core.d"] == {"mellea_local.core.c"}


@pytest.mark.parametrize("late", [False, True])
def test_the_checker_sees_a_backward_import(tmp_path, late):
    line = "from mellea_local.messages import Message\n"
    root = _package(tmp_path, {
        "core/__init__.py": "",
        "core/context.py": ("def f():\n    " + line) if late else line,
        "messages.py": "X = 1\n",
    })
    assert backward_imports(import_graph(root)) == [
        "mellea_local.core.context (core) -> mellea_local.messages (messages)"
    ]
