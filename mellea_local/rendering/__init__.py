"""Rendering: a context view plus an action -> chat-template message dicts -> prompt token ids."""

from mellea_local.rendering.chat import component_text, to_chat_messages, to_message_dicts
from mellea_local.rendering.control_tokens import RenderedPrompt
from mellea_local.rendering.prompt import render_prompt, render_prompt_ids
from mellea_local.rendering.tools import collect_tools, tool_spec

__all__ = [
    "RenderedPrompt",
    "collect_tools",
    "component_text",
    "render_prompt",
    "render_prompt_ids",
    "to_chat_messages",
    "to_message_dicts",
    "tool_spec",
]
