"""Intrinsics: adapter-backed judgements described by an io.yaml, run over an adapter runner.

- ``intrinsic``: ``Intrinsic`` (an io.yaml bound to a name) and the registry of what an io.yaml
  cannot say;
- ``options``: which model options an intrinsic call honours;
- ``rewrite``: the io.yaml's input side (sentence markers, documents, ``{last_message}``);
- ``prompt``: the prompt in token space; ``scoring``: the fast and general paths;
- ``call``: the public ``intrinsic`` / ``aintrinsic`` (and ``aintrinsics_on_turn``:
  several intrinsics on one turn in one forward);
- ``requirement_check``: the requirement-check wrappers; ``score``: reading its number;
- ``rag``, ``core``, ``guardian``: the peer's typed helpers for the 13 granitelib intrinsics
  (``from mellea_local.intrinsics import rag; rag.find_citations(...)``).

Heavy names (torch) resolve on first use, so the requirements layer can import ``score``
without loading a model stack.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "aintrinsic": "mellea_local.intrinsics.call",
    "aintrinsic_batch": "mellea_local.intrinsics.call",
    "aintrinsics_on_turn": "mellea_local.intrinsics.call",
    "intrinsic": "mellea_local.intrinsics.call",
    "intrinsics_on_turn": "mellea_local.intrinsics.call",
    "Intrinsic": "mellea_local.intrinsics.intrinsic",
    "IntrinsicSpec": "mellea_local.intrinsics.intrinsic",
    "register_intrinsic": "mellea_local.intrinsics.intrinsic",
    "registered_intrinsics": "mellea_local.intrinsics.intrinsic",
    "arequirement_check": "mellea_local.intrinsics.requirement_check",
    "arequirement_checks": "mellea_local.intrinsics.requirement_check",
    "requirement_check": "mellea_local.intrinsics.requirement_check",
    "requirement_checks": "mellea_local.intrinsics.requirement_check",
    "requirement_check_value": "mellea_local.intrinsics.score",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mellea_local.intrinsics' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = sorted(_LAZY)
