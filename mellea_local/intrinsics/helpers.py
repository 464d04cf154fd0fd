"""What the typed intrinsic helpers (``rag``, ``core``, ``guardian``) share.

Each helper adds the turn it judges (a question with documents, a response with documents) to
the caller's context, runs the generic ``aintrinsic`` and reads one field of the result,
refusing a result without it (``AdapterSchemaMismatchError``) instead of returning None.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mellea_local.core.context import Context
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import AdapterSchemaMismatchError, InputTypeError, IntrinsicInputError
from mellea_local.intrinsics.call import aintrinsic
from mellea_local.messages import Document, Message
from mellea_local.rendering.prompt import check_text_only


def coerce_documents(documents: Iterable[str | Document] | None, *, auto_doc_id: bool,
                     what: str = "documents") -> list[Document] | None:
    """Documents from strings or ``Document`` objects; strings get ids "0", "1", ... when
    ``auto_doc_id`` (the peer's rule per helper), else none."""
    if documents is None:
        return None
    if (isinstance(documents, str | bytes | Document | Mapping)
            or not isinstance(documents, Iterable)):
        # A dict iterates its keys: scoring them as documents would be silently wrong.
        raise InputTypeError(
            f"{what} must be a list of str or Document, got {type(documents).__name__}; wrap a "
            "single document in a list (for a dict, pass Document(text, title=...) items)."
        )
    out: list[Document] = []
    for i, doc in enumerate(documents):
        if isinstance(doc, str):
            out.append(Document(doc, doc_id=str(i) if auto_doc_id else None))
        elif isinstance(doc, Document):
            out.append(doc)
        else:
            raise InputTypeError(
                f"{what}[{i}] is a {type(doc).__name__}; pass str or Document items."
            )
        if not isinstance(out[-1].text, str) or not out[-1].text.strip():
            raise IntrinsicInputError(
                f"{what}[{i}] is empty ({out[-1].text!r}): an adapter would judge against no "
                "text. Remove it or pass the document's text."
            )
    if not out:
        raise IntrinsicInputError(
            f"{what} is an empty list; pass at least one document (or None where the helper "
            "allows no documents)."
        )
    return out


def require_text(value: object, what: str) -> str:
    """``value`` if it is text with something besides whitespace, else a typed error."""
    if not isinstance(value, str):
        raise InputTypeError(f"{what} must be a str, got {type(value).__name__}.")
    if not value.strip():
        raise IntrinsicInputError(
            f"{what} is empty ({value!r}): there is nothing to judge. Pass the text.")
    return value


def _text_of(data: object) -> tuple[str, str] | None:
    if isinstance(data, Message):
        return data.role, data.content
    if isinstance(data, ModelOutputThunk):
        if data.value is None:
            raise IntrinsicInputError(
                "The context's last turn is a model output that has not been computed yet; "
                "await it before calling this helper."
            )
        return "assistant", data.value
    return None


def resolve_turn(text: str | None, context: Context, role: str, what: str
                 ) -> tuple[str, Context]:
    """``text`` and ``context`` as given; with ``text=None``, the context's last turn (which
    must be a ``role`` turn) and the context before it."""
    if not isinstance(context, Context):
        raise InputTypeError(
            f"context must be a Context (e.g. ChatContext), got {type(context).__name__}."
        )
    if text is not None:
        if not isinstance(text, str):
            raise InputTypeError(f"{what} must be a str or None, got {type(text).__name__}.")
        return require_text(text, what), context
    found = _text_of(context.node_data)
    previous = context.previous_node
    if found is not None and isinstance(context.node_data, Message):
        # The turn is rebuilt from its text, so what only the message carries would be lost.
        check_text_only([context.node_data], "an intrinsic adapter")
    if found is None or found[0] != role or previous is None:
        raise IntrinsicInputError(
            f"{what} is None, so it is read from the context's last turn, but that is not a "
            f"{role} turn; pass {what}=... or end the context with the {role} turn."
        )
    return require_text(found[1], f"{what} (the context's last {role} turn)"), previous


async def run_field(backend: Any, name: str, context: Context, field: str | tuple[str, ...],
                    *, model_options: Mapping[str, Any] | None, **variables: Any) -> Any:
    """Run intrinsic ``name`` and return ``result[field]`` (a tuple: a path of fields)."""
    result = await aintrinsic(backend, name, context, model_options=model_options, **variables)
    value = result
    for key in (field,) if isinstance(field, str) else field:
        if not isinstance(value, Mapping) or key not in value:
            observed = list(value) if isinstance(value, Mapping) else [type(value).__name__]
            raise AdapterSchemaMismatchError(name, observed, [key])
        value = value[key]
    return value


async def run_records(backend: Any, name: str, context: Context, *,
                      model_options: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Run a span intrinsic (citations, ...) and return its list of records."""
    result = await aintrinsic(backend, name, context, model_options=model_options)
    if isinstance(result, Mapping) and "items" in result:
        result = result["items"]  # an io.yaml that nests its records
    if not isinstance(result, list) or not all(isinstance(r, dict) for r in result):
        raise AdapterSchemaMismatchError(name, [type(result).__name__], ["list of records"])
    return result
