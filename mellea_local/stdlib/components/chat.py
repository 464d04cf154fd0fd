"""Mirrors the peer's ``mellea.stdlib.components.chat``: Message, ToolMessage, chat history."""

from mellea_local.messages import (
    Message,
    ToolMessage,
    as_chat_history,
    as_generic_chat_history,
    message_from_template_representation,
)

__all__ = [
    "Message",
    "ToolMessage",
    "as_chat_history",
    "as_generic_chat_history",
    "message_from_template_representation",
]
