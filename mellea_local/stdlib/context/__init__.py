"""Mirrors the peer's ``mellea.stdlib.context``: contexts and compactors."""

from mellea_local.core import (
    CBlock,
    ChatContext,
    Compactor,
    Component,
    Context,
    ContextTurn,
    InlineCompactor,
    PinPredicate,
    SimpleContext,
    ThresholdCompactor,
    WindowCompactor,
    pin_nothing,
    pin_system,
    pin_system_and_initial_user,
)
from mellea_local.react import LLMSummarizeCompactor

__all__ = [
    "CBlock",
    "ChatContext",
    "Compactor",
    "Component",
    "Context",
    "ContextTurn",
    "InlineCompactor",
    "LLMSummarizeCompactor",
    "PinPredicate",
    "SimpleContext",
    "ThresholdCompactor",
    "WindowCompactor",
    "pin_nothing",
    "pin_system",
    "pin_system_and_initial_user",
]
