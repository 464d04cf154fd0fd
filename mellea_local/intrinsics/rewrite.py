"""The conversation an intrinsic reads, rewritten as its io.yaml asks (the input side).

In the order the public granitelib input processor applies them:

1. ``sentence_boundaries``: a marker before every sentence of the last message (numbered from
   0), of the documents (from 0) and of the earlier messages (numbered on after the documents),
   each with the tag the io.yaml gives its location;
2. ``docs_as_message``: the documents move into the messages, as one user turn of labelled
   text (``string``), one user turn of JSON (``json``) or one ``document <id>`` turn each
   (``roles``). Without it they are placed as a generation places them
   (``rendering.place_documents``): the template's ``documents`` variable when it reads one,
   else after the content of the message that carried them;
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
from mellea_local.messages import Message
from mellea_local.rendering import place_documents, to_message_dicts
from mellea_local.rendering.chat import document_record


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

    turns = to_message_dicts(messages, inline_documents=False)
    for turn, content in zip(turns, contents, strict=True):
        turn["content"] = content  # marked text; documents are placed below
    placed = [_Doc(text, title, doc_id)
              for (doc_id, _, title, _), text in zip(docs, doc_texts, strict=True)]
    template_kwargs: dict[str, Any] = {}
    records = [document_record(d.text, d.title, d.doc_id) for d in placed]
    if docs and config.docs_as_message == "string":
        body = "\n\n".join(f"[Document {r.get('doc_id')}]\n{r['text']}" for r in records)
        turns.insert(0, {"role": "user",
                         "content": "You have access to the following documents:\n\n" + body})
    elif docs and config.docs_as_message == "json":
        turns.insert(0, {"role": "user", "content": json.dumps(records)})
    elif docs and config.docs_as_message == "roles":
        turns[:0] = [{"role": f"document {r.get('doc_id')}", "content": r["text"]}
                     for r in records]
    else:
        # The rule a generation follows (``place_documents``): the template's documents slot
        # when it has one, else after the text of the turn that carried them. The same
        # tokens, so an aLoRA intrinsic reuses a RAG generation's cache.
        template_kwargs = place_documents(
            turns, [(owner, d) for (*_, owner), d in zip(docs, placed, strict=True)],
            slot="documents" in template_variables)
    return Conversation(turns, template_kwargs, marked, contents[-1] if contents else None)


@dataclass(frozen=True)
class _Doc:
    text: str
    title: str | None
    doc_id: str | None
