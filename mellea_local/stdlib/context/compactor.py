"""Mirrors the peer's ``mellea.stdlib.context.compactor``: the compactors and pin rules."""

from mellea_local.core import (
    Compactor,
    InlineCompactor,
    PinPredicate,
    ThresholdCompactor,
    WindowCompactor,
    pin_nothing,
    pin_system,
    pin_system_and_initial_user,
)
from mellea_local.react import LLMSummarizeCompactor

__all__ = [
    "Compactor",
    "InlineCompactor",
    "LLMSummarizeCompactor",
    "PinPredicate",
    "ThresholdCompactor",
    "WindowCompactor",
    "pin_nothing",
    "pin_system",
    "pin_system_and_initial_user",
]
