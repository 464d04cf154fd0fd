"""Guardian intrinsics (granitelib-guardian) behind the peer's helper names, signatures and
results: ``policy_guardrails``, ``guardian_check``, ``factuality_detection`` and
``factuality_correction``, each with an ``a``-prefixed async twin.

``guardian_check`` expands the short names the peer expands (``criteria="harm"``,
``scoring_schema="user_prompt"``, default ``"assistant_response"``) to the same texts
(``guardian_texts.py``); any other string is sent as given.
"""

from __future__ import annotations

import difflib
import math
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, cast

from mellea_local.core.context import Context
from mellea_local.errors import AdapterSchemaMismatchError, InputTypeError
from mellea_local.intrinsics.call import run_sync
from mellea_local.intrinsics.guardian_texts import CRITERIA, SCORING_SCHEMAS
from mellea_local.intrinsics.helpers import coerce_documents, resolve_turn, run_field
from mellea_local.messages import Document, Message

_TARGET_ROLE_TO_SCHEMA = {"user": "user_prompt", "assistant": "assistant_response"}
_UNSET: Any = object()


def _full_text(value: Any, what: str, bank: Mapping[str, str]) -> str:
    """``value`` as the adapter reads it: a short name's text, else ``value`` itself.

    Short names match exactly. A single word that is no short name is refused (a criterion
    written out is a sentence; a lone word is a short name mistyped, and sending it as the
    criterion would score something else), naming the nearest short name when there is one.
    Deviation from the peer, which sends any other string as given.
    """
    if not isinstance(value, str) or not value.strip():
        raise InputTypeError(
            f"{what} must be non-empty text or one of the short names {sorted(bank)}, got "
            f"{value!r}.")
    if value in bank:
        return bank[value]
    if len(value.split()) == 1:
        near = difflib.get_close_matches(value.strip().lower(), list(bank), n=1, cutoff=0.6)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise InputTypeError(
            f"{what}={value!r} is not a short name: {hint}Use one of {sorted(bank)}, or write "
            "the criterion out as a sentence.")
    return value


async def _with_documents(context: Context, documents: Iterable[str | Document] | None
                          ) -> Context:
    if documents is None:
        return context
    response, before = resolve_turn(None, context, "assistant", "the judged answer")
    docs = coerce_documents(documents, auto_doc_id=True)
    return before.add(Message("assistant", response, documents=docs))


async def apolicy_guardrails(context: Context, backend: Any, policy_text: str, *,
                             model_options: Mapping[str, Any] | None = None) -> str:
    """Whether the conversation complies with ``policy_text``: ``"Yes"`` (compliant),
    ``"No"`` or ``"Ambiguous"``."""
    from mellea_local.intrinsics.call import aintrinsic

    result = await aintrinsic(backend, "policy-guardrails", context,
                              model_options=model_options, policy_text=policy_text)
    for key in ("label", "score"):
        if isinstance(result, Mapping) and key in result:
            return cast(str, result[key])
    observed = list(result) if isinstance(result, Mapping) else [type(result).__name__]
    raise AdapterSchemaMismatchError("policy-guardrails", observed, ["label"])


async def aguardian_check(context: Context, backend: Any, criteria: str,
                          scoring_schema: str | object = _UNSET,
                          target_role: str | None = None, *,
                          model_options: Mapping[str, Any] | None = None) -> float:
    """Risk under ``criteria`` (a short name such as ``"harm"``, or the full text), from 0.0
    (none) to 1.0. ``scoring_schema`` says what is scored (a short name such as
    ``"user_prompt"``, or the full sentence); ``target_role`` is the peer's deprecated spelling."""
    if target_role is not None:
        warnings.warn("`target_role` is deprecated; use `scoring_schema` instead.",
                      DeprecationWarning, stacklevel=3)
        if scoring_schema is not _UNSET:
            raise InputTypeError("Pass either `scoring_schema` or `target_role`, not both.")
        if target_role not in _TARGET_ROLE_TO_SCHEMA:
            raise InputTypeError(
                f"target_role must be 'user' or 'assistant', got {target_role!r}.")
        scoring_schema = _TARGET_ROLE_TO_SCHEMA[target_role]
    if scoring_schema is _UNSET:
        scoring_schema = "assistant_response"
    value = await run_field(
        backend, "guardian-core", context, ("guardian", "score"), model_options=model_options,
        criteria=_full_text(criteria, "criteria", CRITERIA),
        scoring_schema=_full_text(scoring_schema, "scoring_schema", SCORING_SCHEMAS))
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or not 0.0 <= value <= 1.0):
        raise AdapterSchemaMismatchError("guardian-core", [f"score={value!r}"],
                                         ["score in [0, 1]"])
    return float(value)


async def afactuality_detection(context: Context, backend: Any, *,
                                documents: Iterable[str | Document] | None = None,
                                model_options: Mapping[str, Any] | None = None) -> str:
    """``"yes"`` when the last assistant turn is factually incorrect given the documents
    (``documents``, when given, are attached to that turn), else ``"no"``."""
    context = await _with_documents(context, documents)
    return cast(str, await run_field(backend, "factuality-detection", context, "score",
                                     model_options=model_options))


async def afactuality_correction(context: Context, backend: Any, *,
                                 documents: Iterable[str | Document] | None = None,
                                 model_options: Mapping[str, Any] | None = None) -> str:
    """The last assistant turn corrected against the documents, as plain text."""
    context = await _with_documents(context, documents)
    return cast(str, await run_field(backend, "factuality-correction", context, "correction",
                                     model_options=model_options))


def policy_guardrails(context: Context, backend: Any, policy_text: str, *,
                      model_options: Mapping[str, Any] | None = None) -> str:
    """Synchronous ``apolicy_guardrails``."""
    return run_sync(apolicy_guardrails(context, backend, policy_text,
                                       model_options=model_options), "apolicy_guardrails")


def guardian_check(context: Context, backend: Any, criteria: str,
                   scoring_schema: str | object = _UNSET, target_role: str | None = None, *,
                   model_options: Mapping[str, Any] | None = None) -> float:
    """Synchronous ``aguardian_check``."""
    return run_sync(aguardian_check(context, backend, criteria, scoring_schema, target_role,
                                    model_options=model_options), "aguardian_check")


def factuality_detection(context: Context, backend: Any, *,
                         documents: Iterable[str | Document] | None = None,
                         model_options: Mapping[str, Any] | None = None) -> str:
    """Synchronous ``afactuality_detection``."""
    return run_sync(afactuality_detection(context, backend, documents=documents,
                                          model_options=model_options),
                    "afactuality_detection")


def factuality_correction(context: Context, backend: Any, *,
                          documents: Iterable[str | Document] | None = None,
                          model_options: Mapping[str, Any] | None = None) -> str:
    """Synchronous ``afactuality_correction``."""
    return run_sync(afactuality_correction(context, backend, documents=documents,
                                           model_options=model_options),
                    "afactuality_correction")
