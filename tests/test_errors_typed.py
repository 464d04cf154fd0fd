"""Every exception the package raises is one of its own (``MelleaLocalError``), typed.

``errors.py`` promises one base class: a caller catches ``MelleaLocalError`` for anything the
package refuses, or the builtin it subclasses (``ValueError``, ``TypeError``, ``RuntimeError``)
where code written against the peer expects one. So no module raises a bare builtin, and no
exception class is defined outside ``errors.py``.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from pathlib import Path

import pytest

import mellea_local.errors as errors

PACKAGE = Path(__file__).resolve().parents[1] / "mellea_local"
BARE = {"ValueError", "TypeError", "RuntimeError", "IndexError", "KeyError", "LookupError",
        "OSError", "FileNotFoundError"}


def _raised_name(node: ast.Raise) -> str | None:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return exc.id if isinstance(exc, ast.Name) else None


def bare_raises(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Raise) and _raised_name(node) in BARE:
                found.append((str(path.relative_to(root.parent)), node.lineno))
    return [f"{name}:{line}" for name, line in sorted(found)]


def exception_classes_outside_errors(root: Path) -> list[str]:
    builtin = {n for n in dir(builtins) if n.endswith(("Error", "Exception"))} | {
        "Exception", "MelleaLocalError"}
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "errors.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                         for b in node.bases}
                if bases & builtin or any(b.endswith("Error") for b in bases):
                    found.append(f"{path.relative_to(root.parent)}:{node.name}")
    return found


def test_no_bare_builtin_exception_is_raised():
    assert bare_raises(PACKAGE) == []


def test_no_public_exception_class_lives_outside_errors_py():
    assert exception_classes_outside_errors(PACKAGE) == []


def test_every_exception_in_errors_py_derives_from_the_base():
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, BaseException) and c.__module__ == errors.__name__]
    assert len(classes) > 20
    assert all(issubclass(c, errors.MelleaLocalError) for c in classes)


def test_the_checks_see_what_they_claim(tmp_path):
    root = tmp_path / "mellea_local"
    root.mkdir()
    (root / "a.py").write_text(
        "class DatasetError(ValueError):\n    pass\n\n"
        "def f(x):\n    if x:\n        raise ValueError('x')\n    raise RuntimeError\n")
    assert bare_raises(root) == ["mellea_local/a.py:6", "mellea_local/a.py:7"]
    assert exception_classes_outside_errors(root) == ["mellea_local/a.py:DatasetError"]


@pytest.mark.parametrize(("call", "builtin"), [
    (lambda: __import__("mellea_local.core.compactor", fromlist=["x"]).WindowCompactor(-1),
     ValueError),
    (lambda: __import__("mellea_local.sampling", fromlist=["x"]).RejectionSamplingStrategy(
        loop_budget=0), ValueError),
    (lambda: __import__("mellea_local", fromlist=["x"]).ModelOutputThunk(None).__copy__(),
     RuntimeError),
])
def test_public_refusals_are_typed_and_keep_their_builtin(call, builtin):
    with pytest.raises(errors.MelleaLocalError) as err:
        call()
    assert isinstance(err.value, builtin)
