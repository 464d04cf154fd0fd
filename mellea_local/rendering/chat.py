"""Context entries -> ``Message`` objects -> the OpenAI-shaped dicts chat templates read.

Everything a later turn needs to reproduce an earlier one travels here: assistant thinking
(as ``reasoning_content``), structured tool calls with their ids, and ``tool_call_id`` on tool
results. Dropping any of them would both confuse the model and change the rendered tokens, which
breaks KV-cache reuse across turns.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mellea_local.core.blocks import CBlock
from mellea_local.core.component import Component, Span
from mellea_local.core.text import component_text, unrenderable, with_documents
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.messages import Message, ToolMessage, message_from_template_representation

__all__ = ["component_text", "to_chat_messages", "to_message_dicts"]


def _from_thunk(mot: ModelOutputThunk[Any]) -> Message:
    parsed = mot.parsed_repr
    if isinstance(parsed, Message):
        if parsed.thinking or parsed.tool_calls or not (mot.thinking or mot.tool_calls):
            return parsed
        content = parsed.content
    elif isinstance(parsed, Component):
        content = component_text(parsed)
    elif parsed is not None and parsed is not mot:
        content = str(parsed) if not isinstance(parsed, str) else parsed
    else:
        content = mot.value or ""
    calls = list(mot.tool_calls) if mot.tool_calls else None
    return Message("assistant", content, thinking=mot.thinking, tool_calls=calls)


def to_chat_messages(entries: Iterable[Span]) -> list[Message]:
    """Turn context entries (and the action) into chat Messages, in order.

    Model outputs are assistant turns; other components declare their role through their
    representation (user when they don't); bare blocks are user text.
    """
    out: list[Message] = []
    for entry in entries:
        if isinstance(entry, Message):
            out.append(entry)
        elif isinstance(entry, ModelOutputThunk):
            out.append(_from_thunk(entry))
        elif isinstance(entry, CBlock):
            out.append(Message("user", str(entry)))
        elif isinstance(entry, Component):
            tr = entry.format_for_llm()
            if isinstance(tr, str):
                out.append(Message("user", tr))
            else:
                text = component_text(entry)
                out.append(message_from_template_representation(
                    tr, default_role="user", content=text))
        else:
            raise unrenderable(entry)
    return out


def _tool_call_dict(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        # A JSON string is kept verbatim: templates print it as written, so the re-rendered
        # turn stays token-identical to what the model generated.
        arguments: Any = args
    else:
        arguments = dict(args)
    return {
        "id": call.get("id"),
        "type": "function",
        "function": {"name": fn["name"], "arguments": arguments},
    }


def to_message_dicts(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The dicts ``apply_chat_template`` reads; images and audio are checked elsewhere."""
    dicts: list[dict[str, Any]] = []
    for m in messages:
        d: dict[str, Any] = {"role": m.role, "content": with_documents(m.content, m.documents)}
        if m.role == "assistant":
            if m.thinking:
                d["reasoning_content"] = m.thinking
            if m.tool_calls:
                d["tool_calls"] = [_tool_call_dict(c) for c in m.tool_calls]
        elif m.role == "tool":
            if m.tool_call_id:
                d["tool_call_id"] = m.tool_call_id
            if isinstance(m, ToolMessage):
                d["name"] = m.name
        dicts.append(d)
    return dicts

