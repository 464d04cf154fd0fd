"""Mirrors the peer's ``mellea.stdlib.components.instruction``: the Instruction component."""

from mellea_local.sampling import Instruction

__all__ = ["Instruction"]
