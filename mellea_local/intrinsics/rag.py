"""RAG intrinsics (granitelib-rag) behind the peer's helper names, signatures and results.

``check_answerability``, ``rewrite_question``, ``clarify_query``, ``find_citations``,
``check_context_relevance`` (deprecated upstream) and ``flag_hallucinated_content``, each with
an ``a``-prefixed async twin. Spans in results are character offsets into the texts passed
(the response and each document as given, without sentence markers).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any, cast

from mellea_local.core.context import Context
from mellea_local.errors import InputTypeError
from mellea_local.intrinsics.call import run_sync
from mellea_local.intrinsics.helpers import (
    coerce_documents,
    resolve_turn,
    run_field,
    run_records,
)
from mellea_local.messages import Document, Message

Documents = Iterable[str | Document]


async def acheck_answerability(question: str | None, documents: Documents, context: Context,
                               backend: Any, *, model_options: Mapping[str, Any] | None = None
                               ) -> str:
    """Whether ``documents`` answer ``question``: ``"answerable"`` or ``"unanswerable"``.
    ``question=None`` reads it from the context's last (user) turn."""
    question, context = resolve_turn(question, context, "user", "question")
    turn = Message("user", question, documents=coerce_documents(documents, auto_doc_id=True))
    return cast(str, await run_field(backend, "answerability", context.add(turn),
                                     "answerability", model_options=model_options))


async def arewrite_question(question: str | None, context: Context, backend: Any, *,
                            model_options: Mapping[str, Any] | None = None) -> str:
    """``question`` rewritten to stand alone given the conversation (for retrieval)."""
    question, context = resolve_turn(question, context, "user", "question")
    return cast(str, await run_field(backend, "query_rewrite",
                                     context.add(Message("user", question)),
                                     "rewritten_question", model_options=model_options))


async def aclarify_query(question: str | None, documents: Documents, context: Context,
                         backend: Any, *, model_options: Mapping[str, Any] | None = None) -> str:
    """A clarifying question for an ambiguous ``question``, or ``"CLEAR"``."""
    question, context = resolve_turn(question, context, "user", "question")
    turn = Message("user", question, documents=coerce_documents(documents, auto_doc_id=True))
    return cast(str, await run_field(backend, "query_clarification", context.add(turn),
                                     "clarification", model_options=model_options))


async def afind_citations(response: str | None, documents: Documents, context: Context,
                          backend: Any, *, model_options: Mapping[str, Any] | None = None
                          ) -> list[dict[str, Any]]:
    """The document sentences each sentence of ``response`` cites: records with
    ``response_begin``, ``response_end``, ``response_text``, ``citation_doc_id``,
    ``citation_begin``, ``citation_end``, ``citation_text``. ``response=None`` reads it from
    the context's last (assistant) turn."""
    response, context = resolve_turn(response, context, "assistant", "response")
    turn = Message("assistant", response,
                   documents=coerce_documents(documents, auto_doc_id=False))
    return await run_records(backend, "citations", context.add(turn),
                             model_options=model_options)


async def acheck_context_relevance(question: str | None, document: str | Document,
                                   context: Context, backend: Any, *,
                                   model_options: Mapping[str, Any] | None = None) -> str:
    """Deprecated upstream: ``"relevant"``, ``"irrelevant"`` or ``"partially relevant"``."""
    warnings.warn(
        "check_context_relevance() is deprecated upstream: the context_relevance adapter is "
        "Granite 4.0 only. Filter documents with your own judgement instead.",
        DeprecationWarning, stacklevel=3,
    )
    question, context = resolve_turn(question, context, "user", "question")
    if isinstance(document, str):
        document = Document(document)
    if not isinstance(document, Document):
        raise InputTypeError(
            f"document must be a str or Document, got {type(document).__name__}."
        )
    return cast(str, await run_field(backend, "context_relevance",
                                     context.add(Message("user", question)),
                                     "context_relevance", model_options=model_options,
                                     document_content=document.text))


async def aflag_hallucinated_content(response: str | None, documents: Documents,
                                     context: Context, backend: Any, *,
                                     model_options: Mapping[str, Any] | None = None
                                     ) -> list[dict[str, Any]]:
    """Per sentence of ``response``, whether ``documents`` support it: records with
    ``response_begin``, ``response_end``, ``response_text``, ``faithfulness``,
    ``explanation``."""
    response, context = resolve_turn(response, context, "assistant", "response")
    turn = Message("assistant", response,
                   documents=coerce_documents(documents, auto_doc_id=True))
    return await run_records(backend, "hallucination_detection", context.add(turn),
                             model_options=model_options)


def check_answerability(question: str | None, documents: Documents, context: Context,
                        backend: Any, *, model_options: Mapping[str, Any] | None = None) -> str:
    """Synchronous ``acheck_answerability``."""
    return run_sync(acheck_answerability(question, documents, context, backend,
                                         model_options=model_options), "acheck_answerability")


def rewrite_question(question: str | None, context: Context, backend: Any, *,
                     model_options: Mapping[str, Any] | None = None) -> str:
    """Synchronous ``arewrite_question``."""
    return run_sync(arewrite_question(question, context, backend, model_options=model_options),
                    "arewrite_question")


def clarify_query(question: str | None, documents: Documents, context: Context, backend: Any,
                  *, model_options: Mapping[str, Any] | None = None) -> str:
    """Synchronous ``aclarify_query``."""
    return run_sync(aclarify_query(question, documents, context, backend,
                                   model_options=model_options), "aclarify_query")


def find_citations(response: str | None, documents: Documents, context: Context, backend: Any,
                   *, model_options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Synchronous ``afind_citations``."""
    return run_sync(afind_citations(response, documents, context, backend,
                                    model_options=model_options), "afind_citations")


def check_context_relevance(question: str | None, document: str | Document, context: Context,
                            backend: Any, *, model_options: Mapping[str, Any] | None = None
                            ) -> str:
    """Synchronous ``acheck_context_relevance`` (deprecated upstream)."""
    return run_sync(acheck_context_relevance(question, document, context, backend,
                                             model_options=model_options),
                    "acheck_context_relevance")


def flag_hallucinated_content(response: str | None, documents: Documents, context: Context,
                              backend: Any, *, model_options: Mapping[str, Any] | None = None
                              ) -> list[dict[str, Any]]:
    """Synchronous ``aflag_hallucinated_content``."""
    return run_sync(aflag_hallucinated_content(response, documents, context, backend,
                                               model_options=model_options),
                    "aflag_hallucinated_content")
