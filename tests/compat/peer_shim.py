"""A name-for-name import mapping from the peer library's modules (``mellea.*``) to ours.

Installed by the compatibility harness (``scripts/peer_compat.py``) into a throw-away pytest
run of the peer's own unit tests, so they exercise mellea_local with nothing changed but the
import lines' meaning. Every ``mellea`` module becomes a synthetic package whose attributes are
looked up, by the same name, in our public modules. No peer code is involved: a name we lack
resolves to a placeholder that raises when used, so one missing name fails only the tests that
use it instead of the whole file's collection.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

PEER_ROOT = "mellea"

# Where the peer keeps a name (its module path) -> our modules to look in first, in order.
# Everything else falls back to SEARCH (the public surface, then the implementation modules).
MODULE_MAP: dict[str, tuple[str, ...]] = {
    "mellea": ("mellea_local",),
    "mellea.core": ("mellea_local.core",),
    "mellea.stdlib.session": ("mellea_local.session",),
    "mellea.stdlib.context": ("mellea_local.core", "mellea_local.react.compactor"),
    "mellea.stdlib.context.compactor": ("mellea_local.core.compactor",
                                        "mellea_local.react.compactor"),
    "mellea.stdlib.components.react": ("mellea_local.react.components",
                                       "mellea_local.react.compactor"),
    "mellea.stdlib.frameworks.react": ("mellea_local.react.loop",),
    "mellea.backends.tools": ("mellea_local.tools.tool", "mellea_local.parsing.tool_schema"),
}

SEARCH: tuple[str, ...] = (
    "mellea_local",
    "mellea_local.core",
    "mellea_local.core.blocks",
    "mellea_local.core.image_download",
    "mellea_local.core.spans",
    "mellea_local.core.generation",
    "mellea_local.core.component",
    "mellea_local.core.thunk",
    "mellea_local.core.context",
    "mellea_local.core.compactor",
    "mellea_local.core.backend",
    "mellea_local.core.tool_call",
    "mellea_local.messages",
    "mellea_local.requirements.requirement",
    "mellea_local.requirements.validate",
    "mellea_local.react.components",
    "mellea_local.react.compactor",
    "mellea_local.react.loop",
    "mellea_local.tools.tool",
    "mellea_local.parsing.tool_schema",
    "mellea_local.sampling",
    "mellea_local.session",
    "mellea_local.errors",
    "mellea_local.options",
    "mellea_local.model_ids",
)


class MissingName:
    """Stands for a peer name with no counterpart here; any use raises ``AttributeError``."""

    def __init__(self, qualname: str) -> None:
        object.__setattr__(self, "_qualname", qualname)

    def _fail(self, *args: object, **kwargs: object) -> None:
        raise AttributeError(f"mellea_local has no counterpart of {self._qualname}")

    __call__ = _fail

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        self._fail()

    def __mro_entries__(self, bases: tuple) -> tuple:
        self._fail()
        return ()

    def __repr__(self) -> str:
        return f"<missing {self._qualname}>"


def resolve(module_name: str, attr: str) -> object:
    """Our object named ``attr`` for the peer's ``module_name.attr``, or a MissingName."""
    for candidate in MODULE_MAP.get(module_name, ()) + SEARCH:
        try:
            module = importlib.import_module(candidate)
        except ImportError:
            continue
        if hasattr(module, attr):
            return getattr(module, attr)
    return MissingName(f"{module_name}.{attr}")


class _ShimModule(types.ModuleType):
    def __getattr__(self, attr: str) -> object:
        if attr == "__all__" and self.__name__ in MODULE_MAP:
            # The public names of the module it maps to first.
            return list(importlib.import_module(MODULE_MAP[self.__name__][0]).__all__)
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        value = resolve(self.__name__, attr)
        if isinstance(value, MissingName) and attr.islower() and not attr.startswith("_"):
            # `from mellea.core import base`: a submodule, answered by another shim module
            value = importlib.import_module(f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value


class _ShimLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _ShimModule(spec.name)
        module.__path__ = []  # a package, so any `mellea.a.b` submodule imports
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class PeerFinder(importlib.abc.MetaPathFinder):
    """Answers every ``mellea`` / ``mellea.*`` import with a synthetic mapping module."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        if fullname == PEER_ROOT or fullname.startswith(PEER_ROOT + "."):
            return importlib.machinery.ModuleSpec(fullname, _ShimLoader(), is_package=True)
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(f, PeerFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, PeerFinder())

