"""Mirrors the peer's ``mellea.stdlib.components``: the components a script builds."""

from mellea_local.core import (
    AudioBlock,
    AudioUrlBlock,
    CBlock,
    Component,
    ImageBlock,
    ImageUrlBlock,
    ModelOutputThunk,
    TemplateRepresentation,
    blockify,
)
from mellea_local.errors import ComponentParseError
from mellea_local.messages import (
    Document,
    Message,
    ToolMessage,
    as_chat_history,
    as_generic_chat_history,
)
from mellea_local.sampling import Instruction

__all__ = [
    "AudioBlock",
    "AudioUrlBlock",
    "CBlock",
    "Component",
    "ComponentParseError",
    "Document",
    "ImageBlock",
    "ImageUrlBlock",
    "Instruction",
    "Message",
    "ModelOutputThunk",
    "TemplateRepresentation",
    "ToolMessage",
    "as_chat_history",
    "as_generic_chat_history",
    "blockify",
]
