"""Context entries -> ``Message`` objects -> the OpenAI-shaped dicts chat templates read.

Everything a later turn needs to reproduce an earlier one travels here: assistant thinking
(as ``reasoning_content``), structured tool calls with their ids, and ``tool_call_id`` on tool
results. Dropping any of them would both confuse the model and change the rendered tokens, which
breaks KV-cache reuse across turns.

Documents follow one rule for every caller (a generation, an intrinsic, either backend):
``place_documents``. A chat template with a ``documents`` slot gets them there; otherwise they
are written after the text of the turn that carried them. One rule, because the prompt's
tokens key the KV cache: an intrinsic reuses a RAG generation's cache only when both rendered
the documents alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from mellea_local.core.blocks import CBlock
from mellea_local.core.component import Component, Span
from mellea_local.core.text import component_text, unrenderable, with_documents
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.messages import Message, ToolMessage, message_from_template_representation
from mellea_local.options import template_variables

__all__ = [
    "component_text",
    "document_record",
    "has_documents_slot",
    "place_documents",
    "to_chat_messages",
    "to_message_dicts",
    "to_template_input",
]


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


def to_message_dicts(messages: Iterable[Message], *, inline_documents: bool = True
                     ) -> list[dict[str, Any]]:
    """The dicts ``apply_chat_template`` reads; images and audio are checked elsewhere.

    Documents are written inline after each message's text, unless ``inline_documents`` is
    off (the caller places them: ``to_template_input``).
    """
    dicts: list[dict[str, Any]] = []
    for m in messages:
        content = with_documents(m.content, m.documents) if inline_documents else m.content
        d: dict[str, Any] = {"role": m.role, "content": content}
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



def has_documents_slot(chat_template: str | None) -> bool:
    """Whether the chat template reads a ``documents`` variable (e.g. Granite's)."""
    return "documents" in template_variables(chat_template)


def document_record(text: str, title: str | None, doc_id: str | None) -> dict[str, Any]:
    """One entry of a template's ``documents`` list (the keys Granite templates read)."""
    return {"text": text, **({"title": title} if title else {}),
            **({"doc_id": doc_id} if doc_id is not None else {})}


def place_documents(
    turns: list[dict[str, Any]], owned: Sequence[tuple[int, Any]], *, slot: bool
) -> dict[str, Any]:
    """Put documents where the chat template reads them; the template kwargs to pass.

    ``owned`` holds ``(index of the turn that carried it, document)`` pairs, in order; a
    document has ``text``, ``title`` and ``doc_id`` (``messages.Document``). With ``slot``
    (the template has a ``documents`` variable) they all go there, in order; otherwise each
    turn's documents are written after its text (``with_documents``), ``turns`` being changed
    in place.
    """
    if not owned:
        return {}
    if slot:
        return {"documents": [document_record(d.text, d.title, d.doc_id) for _, d in owned]}
    for owner in sorted({owner for owner, _ in owned}):
        turns[owner]["content"] = with_documents(
            turns[owner]["content"], [d for o, d in owned if o == owner])
    return {}


def to_template_input(
    messages: Sequence[Message], chat_template: str | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The message dicts and the template kwargs (``documents``) of one rendering.

    What a generation renders: documents in the template's slot when it has one, inline
    otherwise (``place_documents``, the rule intrinsics follow too).
    """
    turns = to_message_dicts(messages, inline_documents=False)
    owned = [(i, doc) for i, m in enumerate(messages) for doc in m.documents or []]
    return turns, place_documents(turns, owned, slot=has_documents_slot(chat_template))
