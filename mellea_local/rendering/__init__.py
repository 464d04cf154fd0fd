"""Rendering: a context view plus an action -> chat-template message dicts -> prompt token ids."""

from mellea_local.rendering.chat import (
    component_text,
    place_documents,
    to_chat_messages,
    to_message_dicts,
    to_template_input,
)
from mellea_local.rendering.control_tokens import RenderedPrompt
from mellea_local.rendering.prompt import render_prompt, render_prompt_ids
from mellea_local.rendering.tools import collect_tools, tool_spec

__all__ = [
    "RenderedPrompt",
    "collect_tools",
    "component_text",
    "place_documents",
    "render_prompt",
    "render_prompt_ids",
    "to_chat_messages",
    "to_message_dicts",
    "to_template_input",
    "tool_spec",
]
