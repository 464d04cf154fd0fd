"""Optional extras: which modules each needs, and stand-ins for names a base install lacks.

A base install (``pip install mellea-local``) must import everything ``__all__`` lists, so a
name whose module needs an extra (``LlamaServerBackend`` needs httpx from ``llamacpp``) still
resolves; using it raises ``MissingExtraError`` with the install line. Failing at the import
would break ``from mellea_local import *`` for every user of the base install, not only those
who want the feature.
"""

from __future__ import annotations

import importlib.util
from typing import Any, NoReturn

from mellea_local.errors import MissingExtraError

# The modules each extra brings that mellea_local imports (not every package it pulls in).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "llamacpp": ("httpx", "gguf"),
    "ray": ("ray",),
    "plots": ("matplotlib",),
}


def install_line(extra: str) -> str:
    """The command that installs ``extra``; for ``llamacpp`` with its build bounded (its sdist
    compiles llama.cpp with one job per core and more unless LLAMA_CPP_BUILD_JOBS is set)."""
    if extra == "llamacpp":
        return ("LLAMA_CPP_BUILD_JOBS=2 pip install 'mellea-local[llamacpp]' (it compiles "
                "llama.cpp once; README \"Installing the llamacpp extra\" gives the portable "
                "CMAKE_ARGS, or run scripts/install_llamacpp.sh from a clone)")
    return f"pip install 'mellea-local[{extra}]'"


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (found without importing them)."""
    missing = []
    for module in EXTRA_MODULES[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a finder that refuses it, a broken parent
            found = False
        if not found:
            missing.append(module)
    return missing


def missing_extra(what: str, extra: str, modules: list[str] | None = None) -> MissingExtraError:
    """The error for ``what`` (a class, a command, a flag) used without ``extra``."""
    gone = modules if modules is not None else missing_modules(extra)
    detail = f" ({', '.join(gone)} not installed)" if gone else ""
    return MissingExtraError(
        f"{what} needs the optional {extra!r} extra{detail}; install it with "
        f"{install_line(extra)}.",
        extra,
    )


def require_extra(what: str, extra: str) -> None:
    """Raise ``MissingExtraError`` for ``what`` unless every module of ``extra`` is there."""
    gone = missing_modules(extra)
    if gone:
        raise missing_extra(what, extra, gone)


class _StandInMeta(type):
    def __getattr__(cls, name: str) -> NoReturn:
        # Dunder probes (copy, pickle, inspect, typing) get the usual AttributeError; a real
        # attribute of the missing class (``LlamaServerBackend.launch``) says what to install.
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise missing_extra(f"{cls.__name__}.{name}", cls._extra)


def stand_in(name: str, extra: str, module: str) -> type:
    """A class named ``name`` that raises ``MissingExtraError`` when built or its attributes
    are used: what a base install exports in place of a class that needs ``extra``."""

    def __new__(cls: type, *args: Any, **kwargs: Any) -> NoReturn:
        raise missing_extra(name, extra)

    doc = (f"Stand-in for {module}.{name}, which needs the optional {extra!r} extra: "
           f"{install_line(extra)}.")
    return _StandInMeta(name, (), {"__new__": __new__, "__doc__": doc, "_extra": extra,
                                   "__module__": "mellea_local"})
