"""Mirrors the peer's ``mellea.stdlib.components.react``: the ReACT loop's components."""

from mellea_local.react import (
    MELLEA_FINALIZER_TOOL,
    ReactInitiator,
    ReactThought,
    pin_react_initiator,
    react_summary_prompt,
)

__all__ = [
    "MELLEA_FINALIZER_TOOL",
    "ReactInitiator",
    "ReactThought",
    "pin_react_initiator",
    "react_summary_prompt",
]
