"""Sentence markers: how granitelib intrinsics see documents and messages, and how spans return.

Citations, hallucination detection and context attribution read their inputs with a marker in
front of every sentence (``<c0> First. <c1> Second.``) and answer with sentence numbers. The
input side splits each text into sentences and joins them with markers
(``mark_sentences``); the output side (the ``decode_sentences`` rule) undoes the marking
(``unmark``) and turns a sentence number into character offsets, so results point into the
text the model read with its markers removed, as the public format defines them.

Sentences are split by NLTK's Punkt tokenizer with its default (untrained) parameters, the
splitter the public input processor uses: another splitter would number sentences
differently from what the adapters were trained on.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mellea_local.errors import IntrinsicOutputError


def sentence_delimiter(tag: str, number: int) -> str:
    """The marker that opens sentence ``number``: ``<tag{number}> `` (with its space)."""
    return f"<{tag}{number}> "


@functools.lru_cache(maxsize=1)
def _splitter() -> Any:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer()


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (Punkt, default parameters); whitespace between is dropped."""
    return list(_splitter().tokenize(text))


def mark_sentences(
    texts: Sequence[str], tag: str, first: int = 0
) -> tuple[list[str], int]:
    """Each text split into sentences and rejoined with numbered markers.

    Numbers run on across ``texts`` from ``first``; returns the marked texts and the next free
    number (so documents and earlier messages can share one numbering).
    """
    marked: list[str] = []
    number = first
    for text in texts:
        pieces = []
        for sentence in split_sentences(text):
            pieces.append(sentence_delimiter(tag, number) + sentence)
            number += 1
        marked.append(" ".join(pieces))
    return marked, number


@dataclass(frozen=True)
class Sentence:
    """One sentence of a marked text, located in the text with its markers removed."""

    begin: int
    end: int
    text: str
    document_id: str | None = None
    message_index: int | None = None


def unmark(marked: str, tag: str, first: int, *, where: str) -> list[Sentence]:
    """The sentences of a marked text, numbered from ``first``, with offsets into the text
    without markers (a sentence keeps the space that separated it from the next).

    A text without its first marker cannot be decoded: ``IntrinsicOutputError``.
    """
    opening = sentence_delimiter(tag, first)
    start = marked.find(opening)
    if start == -1:
        raise IntrinsicOutputError(
            f"{where}: the marked text does not hold the sentence marker {opening.strip()!r}; "
            "the request was not marked with this io.yaml's sentence_boundaries."
        )
    sentences: list[Sentence] = []
    number, begin, cursor = first, 0, start + len(opening)
    while True:
        following = marked.find(sentence_delimiter(tag, number + 1), cursor)
        stop = len(marked) if following == -1 else following
        text = marked[cursor:stop]
        sentences.append(Sentence(begin, begin + len(text), text))
        if following == -1:
            return sentences
        begin += len(text)
        cursor = following + len(sentence_delimiter(tag, number + 1))
        number += 1


SENTENCE_SOURCES = ("last_message", "documents", "all_but_last_message")
"""Where sentence markers can be placed (io.yaml ``sentence_boundaries`` keys)."""


@dataclass(frozen=True)
class MarkedInputs:
    """The texts an intrinsic read, as marked, so sentence numbers can be decoded.

    ``documents`` holds ``(doc_id, marked text)`` pairs in the order they were numbered;
    ``history`` the earlier messages (all but the last) and ``last_message`` the last one
    before the instruction turn. ``tags`` is the io.yaml's ``sentence_boundaries``.
    """

    tags: Any
    last_message: str | None = None
    documents: tuple[tuple[str | None, str], ...] = ()
    history: tuple[str, ...] = ()

    def sentences(self, sources: Sequence[str], *, where: str) -> list[Sentence]:
        """All sentences of ``sources`` in order, numbered on from 0 across them (the
        numbering the output side assumes; see ``decode_sentences``)."""
        table: list[Sentence] = []
        for source in sources:
            tag = (self.tags or {}).get(source)
            if not tag:
                raise IntrinsicOutputError(
                    f"{where}: decoding sentences of {source!r}, but the io.yaml's "
                    f"sentence_boundaries has no tag for {source!r}; add one."
                )
            if source == "last_message":
                if self.last_message is None:
                    raise IntrinsicOutputError(f"{where}: there is no last message to decode.")
                table.extend(unmark(self.last_message, tag, len(table), where=where))
            elif source == "documents":
                for doc_id, text in self.documents:
                    if not text.strip():
                        continue  # an empty text has no sentences, so no marker
                    table.extend(
                        Sentence(s.begin, s.end, s.text, document_id=doc_id)
                        for s in unmark(text, tag, len(table), where=f"{where} (document "
                                        f"{doc_id!r})"))
            else:
                for index, text in enumerate(self.history):
                    if not text.strip():
                        continue  # e.g. an assistant turn holding only tool calls
                    table.extend(
                        Sentence(s.begin, s.end, s.text, message_index=index)
                        for s in unmark(text, tag, len(table), where=f"{where} (message "
                                        f"{index})"))
        return table
