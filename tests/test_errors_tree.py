"""The tree at the top of ``errors.py`` is the truth: every public error class is in it, under
its real parent, with the builtin it says it subclasses; and every one is exported from
``mellea_local``. A class added without its line in the tree (or its export) fails here."""

from __future__ import annotations

import builtins
import inspect
import json
import re

import mellea_local
import mellea_local.errors as errors

NAME = re.compile(r"([A-Z]\w*)(?:\s*\[([\w.]+)\])?")
BRANCH = ("├── ", "└── ")


def parse_tree() -> dict[str, tuple[str | None, str | None]]:
    """``{class: (parent, builtin in brackets)}`` from the module docstring's tree."""
    doc = errors.__doc__ or ""
    lines = doc[doc.index("    MelleaLocalError"):].split("\n\n")[0].splitlines()
    found: dict[str, tuple[str | None, str | None]] = {}
    last_at: dict[int, str] = {}
    parent: str | None = None
    for raw in lines:
        line = raw[4:]
        marker = min((line.find(b) for b in BRANCH if b in line), default=-1)
        if line.strip() == "MelleaLocalError":
            found["MelleaLocalError"] = (None, None)
            last_at[0] = "MelleaLocalError"
            continue
        if marker >= 0:  # a new level: its parent is the last name one level up
            depth = marker // 4 + 1
            parent = last_at[depth - 1]
            body = line[marker + 4:]
        else:  # the continuation of the siblings above
            depth = (len(line) - len(line.lstrip("│ "))) // 4
            body = line.lstrip("│ ")
        names = [m for m in NAME.findall(body.split("  ")[0]) if m[0].endswith("Error")]
        for name, base in names:
            found[name] = (parent, base or None)
            last_at[depth] = name
    return found


def error_classes() -> dict[str, type]:
    return {n: c for n, c in vars(errors).items()
            if inspect.isclass(c) and issubclass(c, errors.MelleaLocalError)
            and c.__module__ == errors.__name__}


def _builtin(name: str) -> type:
    return json.JSONDecodeError if name == "json.JSONDecodeError" else getattr(builtins, name)


def test_every_error_class_is_in_the_tree_and_nothing_else():
    assert sorted(parse_tree()) == sorted(error_classes())


def test_the_tree_gives_each_class_its_parent_and_builtin():
    classes = error_classes()
    for name, (parent, base) in parse_tree().items():
        cls = classes[name]
        if parent is not None:
            own = [b.__name__ for b in cls.__bases__ if issubclass(b, errors.MelleaLocalError)]
            # A bracket may name a second error parent: IntrinsicSchemaError [IntrinsicOutputError].
            assert [b for b in own if b != base] == [parent], name
        if base is not None:
            expected = classes[base] if base in classes else _builtin(base)
            assert issubclass(cls, expected), f"{name} is not a {base}"


def test_every_error_class_is_exported():
    exported = set(mellea_local.__all__)
    assert sorted(set(error_classes()) - exported) == []
    for name in error_classes():
        assert getattr(mellea_local, name) is getattr(errors, name)
