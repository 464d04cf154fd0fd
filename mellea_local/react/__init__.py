"""The ReACT agent loop: goal and tools in, tool calls and observations, a final answer out."""

from mellea_local.react.compactor import (
    DEFAULT_SUMMARY_PROMPT,
    LLMSummarizeCompactor,
    react_summary_prompt,
)
from mellea_local.react.components import (
    MELLEA_FINALIZER_TOOL,
    ReactInitiator,
    ReactThought,
    finalizer_tool,
    pin_react_initiator,
)
from mellea_local.react.loop import react

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "MELLEA_FINALIZER_TOOL",
    "LLMSummarizeCompactor",
    "ReactInitiator",
    "ReactThought",
    "finalizer_tool",
    "pin_react_initiator",
    "react",
    "react_summary_prompt",
]
