"""Mirrors the peer's ``mellea.stdlib.frameworks.react``: the ``react`` agent loop."""

from mellea_local.react import react

__all__ = ["react"]
