"""Checks an adapter's output must pass before its result is returned: the io.yaml's JSON
schema (types, enums, required fields, finite numbers) and the rules of probability for the
log-probabilities the result is computed from.

Why here and not only in constrained decoding: an engine may not enforce the schema (a
server, recorded data through ``result_from_chat_completion``), and an engine's numbers can be
broken (a NaN logprob became ``{"score": NaN}``; a top-k list summing past 1 or naming a token
twice weighs a category twice). A result computed from either would look like an answer.

The schema check covers the keywords io.yaml schemas use (``type``, ``enum``, ``const``,
``properties``, ``required``, ``additionalProperties``, ``items``, ``minItems``/``maxItems``,
``minimum``/``maximum``, ``anyOf``/``oneOf``/``allOf``, local ``$ref``); other keywords are
not enforced (no dependency on a full validator). String lengths are left to the grammar: a
generated text joined from per-token decodes can spell a split UTF-8 character as several
U+FFFD, so its length here is not the length the grammar counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from mellea_local.errors import (
    AdapterSchemaMismatchError,
    IntrinsicOutputError,
    IntrinsicSchemaError,
)

TOP_LOGPROB_TOLERANCE = 0.01
"""How far past 1 the probabilities of a top-k list may sum: engines round logprobs (the
peer's canned requirement-check example, rounded to 3 decimals, sums to 1.0024) and may run
their softmax in half precision. A broken list (unnormalised, a token counted twice) is far
past it."""

_TYPES: dict[str, Any] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}
_FIX = ("The adapter answered outside its io.yaml's response_format: use an adapter trained "
        "for this base model (or fix its io.yaml), and raise max_completion_tokens if the "
        "output was cut off.")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _path(path: Sequence[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path) or "the output"


def schema_errors(value: Any, schema: Any, root: Any = None,
                  path: tuple[str | int, ...] = ()) -> list[tuple[str, str]]:
    """``(observed, expected)`` pairs for every place ``value`` breaks ``schema``."""
    root = schema if root is None else root
    if not isinstance(schema, Mapping):
        return []
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        return schema_errors(value, target, root, path)
    where = _path(path)
    found: list[tuple[str, str]] = []
    if isinstance(value, float) and not math.isfinite(value):
        return [(f"{where}: {value!r}", f"{where}: a finite number")]
    kinds = schema.get("type")
    if kinds is not None:
        names = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_TYPES.get(k, lambda v: True)(value) for k in names):
            return [(f"{where}: {_show(value)} ({type(value).__name__})",
                     f"{where}: {' or '.join(map(str, names))}")]
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        found.append((f"{where}: {_show(value)}", f"{where}: one of {list(schema['enum'])}"))
    if "const" in schema and not _same(value, schema["const"]):
        found.append((f"{where}: {_show(value)}", f"{where}: {schema['const']!r}"))
    for alternatives, need in (("anyOf", 1), ("oneOf", 1)):
        options = schema.get(alternatives)
        if isinstance(options, list | tuple) and options:
            ok = sum(not schema_errors(value, o, root, path) for o in options)
            if ok < need:
                found.append((f"{where}: {_show(value)}", f"{where}: {alternatives} {options}"))
    for sub in schema.get("allOf") or ():
        found += schema_errors(value, sub, root, path)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            found.append((f"{where}: {value!r}", f"{where}: >= {schema['minimum']}"))
        if "maximum" in schema and value > schema["maximum"]:
            found.append((f"{where}: {value!r}", f"{where}: <= {schema['maximum']}"))
    if isinstance(value, Mapping):
        props = schema.get("properties") or {}
        for key in schema.get("required") or ():
            if key not in value:
                found.append((f"{where}: keys {sorted(map(str, value))}",
                              f"{_path((*path, key))}: present"))
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                found += schema_errors(item, props[key], root, (*path, key))
            elif extra is False:
                found.append((f"{_path((*path, key))}: present", f"{where}: only "
                              f"{sorted(props)}"))
            elif isinstance(extra, Mapping):
                found += schema_errors(item, extra, root, (*path, key))
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            found.append((f"{where}: {len(value)} items", f"{where}: >= {schema['minItems']}"))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            found.append((f"{where}: {len(value)} items", f"{where}: <= {schema['maxItems']}"))
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                found += schema_errors(item, items, root, (*path, i))
    return found


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``True`` is not ``1``."""
    return (type(a) is type(b) and a == b) or (
        isinstance(a, int | float) and isinstance(b, int | float)
        and not isinstance(a, bool) and not isinstance(b, bool) and a == b)


def check_output_schema(value: Any, schema: Mapping[str, Any] | None, name: str) -> None:
    """Refuse adapter output that its io.yaml's ``response_format`` does not allow, or that
    holds a non-finite number anywhere."""
    found = schema_errors(value, schema) if schema is not None else []
    found += [f for f in _non_finite(value) if f not in found]
    if found:
        raise IntrinsicSchemaError(name, [o for o, _ in found[:5]], [e for _, e in found[:5]],
                                   _FIX)


def with_schema_detail(exc: AdapterSchemaMismatchError, value: Any,
                       schema: Mapping[str, Any] | None) -> AdapterSchemaMismatchError:
    """A rule's shape error, with what the schema says about ``value`` and the fix added (its
    observed and expected keys kept); ``exc`` itself when the schema finds nothing."""
    found = schema_errors(value, schema) if schema is not None else []
    if not found:
        return exc
    detail = "; ".join(f"{o} where the schema wants {e}" for o, e in found[:3])
    return IntrinsicSchemaError(exc.name, exc.observed_keys, exc.expected_keys,
                                f"Against the io.yaml's response_format: {detail}. {_FIX}")


def _non_finite(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str, str]]:
    if isinstance(value, float) and not math.isfinite(value):
        return [(f"{_path(path)}: {value!r}", f"{_path(path)}: a finite number")]
    if isinstance(value, Mapping):
        return [f for k, v in value.items() for f in _non_finite(v, (*path, k))]
    if isinstance(value, list):
        return [f for i, v in enumerate(value) for f in _non_finite(v, (*path, i))]
    return []


def check_result_finite(result: Any, name: str) -> None:
    """A computed result (after the rules) with a NaN or infinity anywhere is refused."""
    found = _non_finite(result)
    if found:
        raise IntrinsicOutputError(
            f"Intrinsic {name!r} computed a non-finite value ({found[0][0]}); the model's "
            "probabilities were broken (a NaN or infinite logit). Check the adapter fits this "
            "base model and that the model's weights are finite.")


def check_token_logprobs(tokens: Sequence[Any], name: str, *, normalised: bool = True,
                         distinct: bool = True) -> None:
    """Every generated token's logprob and top-k list obeys probability: <= 0 and not NaN;
    when ``distinct``, no token text twice among the alternatives; when ``normalised`` (not
    divided by a temperature), the top-k probabilities summing to at most 1
    (+ ``TOP_LOGPROB_TOLERANCE``).

    The last two are for logprobs an engine hands us (an OpenAI-style response): our own
    engine's top-k come from a softmax, and its per-token decodes can legitimately collide
    (distinct byte tokens decode alike). A text with U+FFFD may always appear twice."""
    for i, token in enumerate(tokens):
        where = f"Intrinsic {name!r}: logprobs of token {i} ({token.token!r})"
        values = [token.logprob, *(lp for _, lp in token.top_logprobs)]
        # -inf is probability 0 (a token a grammar masked): valid. NaN and > 0 are not.
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int | float)
               or math.isnan(v) or v > 0]
        if bad:
            raise IntrinsicOutputError(
                f"{where} include {bad[0]!r}: a log-probability must be a number <= 0 (not "
                "NaN). The engine's numbers are broken; check the model's weights and the "
                "engine.")
        names = [t for t, _ in token.top_logprobs]
        twice = sorted({t for t in names if names.count(t) > 1 and "\ufffd" not in t})
        if distinct and twice:
            raise IntrinsicOutputError(
                f"{where} list {twice[0]!r} twice among the top alternatives, so it would be "
                "counted twice. The engine's top-k list is broken; check the engine.")
        total = sum(math.exp(lp) for _, lp in token.top_logprobs)
        if normalised and total > 1 + TOP_LOGPROB_TOLERANCE:
            raise IntrinsicOutputError(
                f"{where}: the top alternatives' probabilities sum to {total:.4f} > 1. The "
                "engine's top-k list is broken (not normalised); check the engine.")
