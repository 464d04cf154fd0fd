"""Core intrinsics (granitelib-core) behind the peer's helper names, signatures and results:
``check_certainty``, ``requirement_check`` and ``find_context_attributions``, each with an
``a``-prefixed async twin."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from mellea_local.core.context import Context
from mellea_local.errors import AdapterSchemaMismatchError
from mellea_local.intrinsics.call import run_sync
from mellea_local.intrinsics.helpers import (
    coerce_documents,
    require_text,
    resolve_turn,
    run_field,
    run_records,
)
from mellea_local.intrinsics.score import REQUIREMENT_CHECK
from mellea_local.messages import Document, Message


def _probability(name: str, value: Any, key: str) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or not 0.0 <= value <= 1.0):
        raise AdapterSchemaMismatchError(name, [f"{key}={value!r}"], [f"{key} in [0, 1]"])
    return float(value)


async def acheck_certainty(context: Context, backend: Any,
                           model_options: Mapping[str, Any] | None = None) -> float:
    """How certain the model is of the context's last assistant turn, in [0, 1]."""
    resolve_turn(None, context, "assistant", "the judged answer")
    value = await run_field(backend, "uncertainty", context, "certainty",
                            model_options=model_options)
    return _probability("uncertainty", value, "certainty")


async def arequirement_check(context: Context, backend: Any, requirement: str,
                             model_options: Mapping[str, Any] | None = None) -> float:
    """P(the last assistant turn meets ``requirement``), in [0, 1]."""
    require_text(requirement, "requirement")
    value = await run_field(backend, REQUIREMENT_CHECK, context, ("requirement_check", "score"),
                            model_options=model_options, requirement=requirement)
    return _probability(REQUIREMENT_CHECK, value, "requirement_check.score")


async def afind_context_attributions(response: str | None,
                                     documents: Iterable[str | Document], context: Context,
                                     backend: Any,
                                     model_options: Mapping[str, Any] | None = None
                                     ) -> list[dict[str, Any]]:
    """Which context sentences each sentence of ``response`` drew on: records with
    ``response_begin``, ``response_end``, ``response_text``, ``attribution_doc_id``,
    ``attribution_msg_index``, ``attribution_begin``, ``attribution_end`` and
    ``attribution_text`` (a document span, or a span of earlier message number
    ``attribution_msg_index``)."""
    response, context = resolve_turn(response, context, "assistant", "response")
    turn = Message("assistant", response,
                   documents=coerce_documents(documents, auto_doc_id=False))
    return await run_records(backend, "context-attribution", context.add(turn),
                             model_options=model_options)


def check_certainty(context: Context, backend: Any,
                    model_options: Mapping[str, Any] | None = None) -> float:
    """Synchronous ``acheck_certainty``."""
    return run_sync(acheck_certainty(context, backend, model_options), "acheck_certainty")


def requirement_check(context: Context, backend: Any, requirement: str,
                      model_options: Mapping[str, Any] | None = None) -> float:
    """Synchronous ``arequirement_check``."""
    return run_sync(arequirement_check(context, backend, requirement, model_options),
                    "arequirement_check")


def find_context_attributions(response: str | None, documents: Iterable[str | Document],
                              context: Context, backend: Any,
                              model_options: Mapping[str, Any] | None = None
                              ) -> list[dict[str, Any]]:
    """Synchronous ``afind_context_attributions``."""
    return run_sync(afind_context_attributions(response, documents, context, backend,
                                               model_options), "afind_context_attributions")
