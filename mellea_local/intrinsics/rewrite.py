"""The conversation an intrinsic reads, rewritten as its io.yaml asks (the input side).

In the order the public granitelib input processor applies them:

1. ``sentence_boundaries``: a marker before every sentence of the last message (numbered from
   0), of the documents (from 0) and of the earlier messages (numbered on after the documents),
   each with the tag the io.yaml gives its location;
2. ``docs_as_message``: the documents move into the messages, as one user turn of labelled
   text (``string``), one user turn of JSON (``json``) or one ``document <id>`` turn each
   (``roles``). Without it they reach the chat template as its ``documents`` variable when the
   template reads one, and are otherwise written after the content of the message that carried
   them, as a generation renders them;
3. the instruction turn (see ``Intrinsic.instruction``), whose ``{last_message}`` is the last
   turn as the model reads it (markers included).

The marked texts are kept (``MarkedInputs``) so ``decode_sentences`` can turn sentence numbers
back into offsets into the texts the caller passed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mellea_local.adapters import IOConfig
from mellea_local.adapters.sentences import MarkedInputs, mark_sentences
from mellea_local.core.text import with_documents
from mellea_local.messages import Message
from mellea_local.rendering import to_message_dicts


@dataclass(frozen=True)
class Conversation:
    """The rewritten conversation: chat-template turns and template variables, plus what the
    output rules need to read the adapter's answer."""

    turns: list[dict[str, Any]]
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    marked: MarkedInputs | None = None
    last_message: str | None = None


def rewrite_conversation(
    config: IOConfig, messages: Sequence[Message], template_variables: frozenset[str]
) -> Conversation:
    """``messages`` rewritten per ``config`` (see the module docstring)."""
    docs: list[tuple[str | None, str, str | None, int]] = []  # id, text, title, owner
    for owner, message in enumerate(messages):
        for doc in message.documents or []:
            docs.append((doc.doc_id, doc.text, doc.title, owner))
    contents = [m.content for m in messages]
    doc_texts = [text for _, text, _, _ in docs]
    tags = dict(config.sentence_boundaries or {})
    if tags.get("last_message") and contents:
        [contents[-1]], _ = mark_sentences([contents[-1]], tags["last_message"])
    following = 0
    if tags.get("documents") and doc_texts:
        doc_texts, following = mark_sentences(doc_texts, tags["documents"])
    if tags.get("all_but_last_message") and len(contents) > 1:
        contents[:-1], following = mark_sentences(contents[:-1], tags["all_but_last_message"],
                                                  following)
    marked = MarkedInputs(
        tags, last_message=contents[-1] if contents else None,
        documents=tuple((doc_id, text) for (doc_id, *_), text in zip(docs, doc_texts,
                                                                      strict=True)),
        history=tuple(contents[:-1]),
    ) if tags else None

    turns = to_message_dicts(messages)
    for turn, content in zip(turns, contents, strict=True):
        turn["content"] = content  # documents are placed below, not inlined
    template_kwargs: dict[str, Any] = {}
    records = [
        {"text": text, **({"title": title} if title else {}),
         **({"doc_id": doc_id} if doc_id is not None else {})}
        for (doc_id, _, title, _), text in zip(docs, doc_texts, strict=True)
    ]
    if docs and config.docs_as_message == "string":
        body = "\n\n".join(f"[Document {r.get('doc_id')}]\n{r['text']}" for r in records)
        turns.insert(0, {"role": "user",
                         "content": "You have access to the following documents:\n\n" + body})
    elif docs and config.docs_as_message == "json":
        turns.insert(0, {"role": "user", "content": json.dumps(records)})
    elif docs and config.docs_as_message == "roles":
        turns[:0] = [{"role": f"document {r.get('doc_id')}", "content": r["text"]}
                     for r in records]
    elif docs and "documents" in template_variables:
        template_kwargs["documents"] = records
    elif docs:
        # The template has no documents slot: written after the text of the turn that carried
        # them, exactly as a generation renders them (``with_documents``).
        for owner in sorted({owner for *_, owner in docs}):
            mine = [_Doc(text, title, doc_id)
                    for (doc_id, _, title, o), text in zip(docs, doc_texts, strict=True)
                    if o == owner]
            turns[owner]["content"] = with_documents(turns[owner]["content"], mine)
    return Conversation(turns, template_kwargs, marked, contents[-1] if contents else None)


@dataclass(frozen=True)
class _Doc:
    text: str
    title: str | None
    doc_id: str | None

