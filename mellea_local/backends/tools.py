"""Mirrors the peer's ``mellea.backends.tools``: tool definitions and the ``@tool`` decorator."""

from mellea_local.tools import AbstractMelleaTool, MelleaTool, tool

__all__ = ["AbstractMelleaTool", "MelleaTool", "tool"]
