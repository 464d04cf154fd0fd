"""Two rules of the intrinsic redesign, read off the source with ``ast``.

- The intrinsic's name ``"requirement-check"`` is written once (``core/backend.py``'s
  ``REQUIREMENT_CHECK``); everything else imports it, so no code path special-cases it by
  spelling it again (prose in docstrings and messages is not code and is not counted).
- LoRA vs aLoRA is decided by the strategy objects (``adapters/kinds.py``): no module outside
  the adapters layer that defines the kinds tests ``is_alora`` or compares with an
  ``AdapterKind`` member; and no module outside ``adapters/`` reads a strategy's kind flags
  (``invoked``, ``reuses_base_cache``) to branch on them: it calls the hook that decides
  (``base_cache_prefix``, ``engine_invocation``, ...), as PEFT's layers call a variant.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mellea_local"
NAME = "requirement-check"
KIND_DEFINERS = {"adapters/kinds.py", "adapters/library.py", "adapters/loaded.py"}
STRATEGY_FLAGS = {"invoked", "reuses_base_cache"}
FLAG_EXEMPT = ("adapters/",)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)):
            ids.add(id(body[0].value))
    return ids


def name_literals(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and node.value == NAME
                    and id(node) not in docs):
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return sorted(found)


def kind_branches(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in KIND_DEFINERS:
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Attribute) and (
                node.attr == "is_alora"
                or (node.attr in ("ALORA", "LORA") and isinstance(node.value, ast.Name)
                    and node.value.id == "AdapterKind")
            ):
                found.append(f"{rel}:{node.lineno}")
    return sorted(found)


def _names_a_strategy(node: ast.AST) -> bool:
    """``strategy``, ``x.strategy``, ``strategy_for(kind)``: an expression that is one."""
    if isinstance(node, ast.Call):
        node = node.func
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name in ("strategy", "strategy_for")


def strategy_flag_reads(root: Path, exempt: tuple[str, ...] = FLAG_EXEMPT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(exempt):
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr in STRATEGY_FLAGS
                    and _names_a_strategy(node.value)):
                found.append(f"{rel}:{node.lineno}")
    return sorted(found)


def test_no_caller_branches_on_a_strategy_flag():
    assert strategy_flag_reads(PACKAGE) == []


def test_the_flag_rule_sees_what_it_claims(tmp_path):
    (tmp_path / "adapters").mkdir()
    (tmp_path / "adapters" / "kinds.py").write_text("x = strategy.invoked\n")
    (tmp_path / "b.py").write_text(
        "def f(adapter, kind, shared):\n"
        "    if adapter.strategy.reuses_base_cache:\n"
        "        return shared\n"
        "    y = shared if strategy_for(kind).invoked else 0\n"
        "    return adapter.strategy.base_cache_prefix(shared)\n")
    assert strategy_flag_reads(tmp_path, exempt=("adapters/",)) == ["b.py:2", "b.py:4"]


def test_the_requirement_check_name_is_written_once():
    assert name_literals(PACKAGE) == ["core/backend.py:" + str(_constant_line())]


def _constant_line() -> int:
    tree = ast.parse((PACKAGE / "core" / "backend.py").read_text("utf-8"))
    [line] = [n.lineno for n in tree.body if isinstance(n, ast.Assign)
              and any(getattr(t, "id", None) == "REQUIREMENT_CHECK" for t in n.targets)]
    return line


def test_no_lora_alora_branch_outside_the_strategies():
    assert kind_branches(PACKAGE) == []


def test_the_rules_see_what_they_claim(tmp_path):
    (tmp_path / "a.py").write_text(
        '"""requirement-check is fine in a docstring."""\n'
        'X = "requirement-check"\n'
        "def f(adapter):\n"
        "    return 1 if adapter.is_alora else 2\n"
        "def g(k):\n"
        "    return k == AdapterKind.ALORA\n")
    assert name_literals(tmp_path) == ["a.py:2"]
    assert kind_branches(tmp_path) == ["a.py:4", "a.py:6"]
