"""Check tool-call arguments against a tool's JSON-schema parameters, without changing them.

Why our own checker instead of pydantic's lax mode or transformers' argument casting: both coerce
(``"3"`` becomes ``3``), so the tool receives something the model never wrote and the model never
learns it wrote the wrong type. We only report; the agent loop shows the report to the model.

The supported keywords are the ones pydantic's ``model_json_schema()`` and transformers'
``get_json_schema`` emit: ``type`` (a name or a list, ``null`` included), ``nullable``,
``properties``, ``required``, ``additionalProperties``, ``enum``, ``const``, ``items``,
``prefixItems``, ``anyOf``, ``oneOf``, ``allOf``, ``not``, ``$ref`` into ``$defs``, and the
numeric, length, ``pattern`` and ``uniqueItems`` constraints that ``Field(...)`` adds.
Annotations (``title``, ``description``, ``default``, ``examples``, ``format``) never fail a
value: a ``default`` is the tool's business, so an absent optional argument stays absent.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from mellea_local.errors import ToolError

__all__ = ["function_parameters", "schema_errors", "validate_arguments"]

# A tool declared without parameters takes none; extra arguments would only fail inside the tool.
_NO_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {},
    "additionalProperties": False,
}

_JSON_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
_MAX_REF_HOPS = 64  # a $ref chain longer than this without consuming the value is a cycle
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def function_parameters(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The parameters schema of a function spec, plain or wrapped OpenAI-style.

    Accepts ``{"name", "description", "parameters"}`` and ``{"type": "function", "function":
    {...}}`` so callers can pass whichever shape they already hold.
    """
    if not isinstance(spec, Mapping):
        raise ToolError(
            f"A tool spec must be a mapping with 'name' and 'parameters', got "
            f"{type(spec).__name__}. Pass the tool's JSON-schema function spec."
        )
    function = spec.get("function")
    if isinstance(function, Mapping):
        spec = function
    parameters = spec.get("parameters")
    if parameters is None:
        return _NO_PARAMETERS
    if not isinstance(parameters, Mapping):
        raise ToolError(
            f"Tool {spec.get('name')!r} has 'parameters' of type {type(parameters).__name__}; "
            "it must be a JSON-schema object (a mapping) or absent."
        )
    return parameters


def validate_arguments(arguments: Any, spec: Mapping[str, Any]) -> list[str]:
    """Every way ``arguments`` breaks the tool's parameter schema; empty when it conforms.

    Raises ``ToolError`` when the schema itself is malformed: that is a bug in the tool
    definition, not something the model can fix.
    """
    parameters = function_parameters(spec)
    return schema_errors(arguments, parameters, root=parameters, path="arguments")


def schema_errors(
    value: Any,
    schema: Any,
    *,
    root: Mapping[str, Any] | None = None,
    path: str = "value",
) -> list[str]:
    """Validate one JSON value against a schema; ``root`` is where ``$ref`` pointers resolve."""
    return _errors(value, schema, root if root is not None else schema, path, 0)


def _errors(value: Any, schema: Any, root: Any, path: str, hops: int) -> list[str]:
    if schema is True:
        return []
    if schema is False:
        return [f"{path}: no value is allowed here; leave it out"]
    if not isinstance(schema, Mapping):
        raise ToolError(
            f"Malformed tool schema at {path}: expected an object or a boolean, got "
            f"{type(schema).__name__}. Fix the tool's parameter schema."
        )

    errors: list[str] = []
    if "$ref" in schema:
        if hops >= _MAX_REF_HOPS:
            raise ToolError(
                f"Tool schema $ref {schema['$ref']!r} at {path} loops on itself; "
                "fix the tool's $defs."
            )
        errors += _errors(value, _resolve(schema["$ref"], root, path), root, path, hops + 1)
        # pydantic puts annotations (and sometimes constraints) next to a $ref; check those too.
        schema = {k: v for k, v in schema.items() if k != "$ref"}

    if value is None and schema.get("nullable") is True:
        return errors

    if "type" in schema:
        problem = _type_problem(value, schema["type"], path)
        if problem:
            return [*errors, problem]  # further checks on a value of the wrong type only add noise

    if "enum" in schema and not any(_json_equal(value, option) for option in schema["enum"]):
        allowed = ", ".join(_json_text(option) for option in schema["enum"])
        errors.append(f"{path}: {_short(value)} is not one of the allowed values: {allowed}")
    if "const" in schema and not _json_equal(value, schema["const"]):
        errors.append(f"{path}: must be exactly {_json_text(schema['const'])}, got {_short(value)}")

    if _is_number(value):
        errors += _number_errors(value, schema, path)
    elif isinstance(value, str):
        errors += _string_errors(value, schema, path)
    elif isinstance(value, list):
        errors += _array_errors(value, schema, root, path, hops)
    elif isinstance(value, dict):
        errors += _object_errors(value, schema, root, path, hops)

    errors += _combinator_errors(value, schema, root, path, hops)
    return errors


def _resolve(ref: Any, root: Any, path: str) -> Any:
    """Follow a local JSON pointer (``#/$defs/Name``); remote references are never fetched."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise ToolError(
            f"Tool schema at {path} uses $ref {ref!r}; only local references ('#/...') are "
            "supported. Inline the referenced schema or move it into $defs."
        )
    target = root
    for raw_part in ref[1:].split("/")[1:]:
        part = raw_part.replace("~1", "/").replace("~0", "~")
        if isinstance(target, Mapping) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            raise ToolError(
                f"Tool schema $ref {ref!r} at {path} points at nothing; add the missing "
                "definition to the schema's $defs."
            )
    return target


def _type_problem(value: Any, declared: Any, path: str) -> str | None:
    names = [declared] if isinstance(declared, str) else declared
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ToolError(
            f"Tool schema 'type' at {path} must be a type name or a list of them, got {declared!r}."
        )
    unknown = [n for n in names if n not in _JSON_TYPES]
    if unknown:
        raise ToolError(
            f"Tool schema at {path} uses unknown type(s) {unknown}; use JSON-schema types "
            f"{list(_JSON_TYPES)}."
        )
    if any(_has_type(value, name) for name in names):
        return None
    expected = names[0] if len(names) == 1 else " or ".join(names)
    return f"{path}: expected {expected}, got {_short(value)}"


def _has_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        # JSON Schema counts 3.0 as an integer; the value is left exactly as written.
        return _is_number(value) and float(value).is_integer()
    if name == "number":
        return _is_number(value)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    return isinstance(value, dict)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def _number_errors(value: float, schema: Mapping[str, Any], path: str) -> list[str]:
    errors = []
    bounds = (
        ("minimum", lambda v, b: v >= b, "at least"),
        ("maximum", lambda v, b: v <= b, "at most"),
        ("exclusiveMinimum", lambda v, b: v > b, "greater than"),
        ("exclusiveMaximum", lambda v, b: v < b, "less than"),
    )
    for keyword, holds, words in bounds:
        bound = schema.get(keyword)
        if _is_number(bound) and not holds(value, bound):
            errors.append(f"{path}: must be {words} {bound}, got {_short(value)}")
    step = schema.get("multipleOf")
    if _is_number(step) and step > 0:
        quotient = value / step
        if not math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9):
            errors.append(f"{path}: must be a multiple of {step}, got {_short(value)}")
    return errors


def _string_errors(value: str, schema: Mapping[str, Any], path: str) -> list[str]:
    errors = []
    if isinstance(schema.get("minLength"), int) and len(value) < schema["minLength"]:
        errors.append(f"{path}: must be at least {schema['minLength']} characters long")
    if isinstance(schema.get("maxLength"), int) and len(value) > schema["maxLength"]:
        errors.append(f"{path}: must be at most {schema['maxLength']} characters long")
    if "pattern" in schema:
        try:
            matches = re.search(_python_pattern(schema["pattern"]), value) is not None
        except (re.error, TypeError) as exc:
            raise ToolError(
                f"Tool schema 'pattern' at {path} is not a valid regular expression "
                f"({exc}); fix the tool's parameter schema."
            ) from exc
        if not matches:
            errors.append(f"{path}: must match the pattern {schema['pattern']!r}")
    return errors


def _python_pattern(pattern: str) -> str:
    """Rewrite a JSON-schema (ECMA-262) pattern for Python's ``re``.

    In ECMA an unescaped ``$`` outside a character class means end of input; Python's ``$``
    also matches before a final newline, which would let ``"12345\\n"`` pass ``^[0-9]{5}$``.
    """
    out: list[str] = []
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            out.append(pattern[index : index + 2])
            index += 2
            continue
        if char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        out.append(r"\Z" if char == "$" and not in_class else char)
        index += 1
    return "".join(out)


def _array_errors(
    value: list[Any], schema: Mapping[str, Any], root: Any, path: str, hops: int
) -> list[str]:
    errors = []
    prefix = schema.get("prefixItems")
    items = schema.get("items")
    if isinstance(items, list):  # draft-4 tuple form
        prefix, items = items, schema.get("additionalItems")
    prefix = prefix if isinstance(prefix, list) else []
    for index, item in enumerate(value):
        if index < len(prefix):
            errors += _errors(item, prefix[index], root, f"{path}[{index}]", 0)
        elif items is not None:
            errors += _errors(item, items, root, f"{path}[{index}]", 0)
    if isinstance(schema.get("minItems"), int) and len(value) < schema["minItems"]:
        errors.append(f"{path}: must hold at least {schema['minItems']} items")
    if isinstance(schema.get("maxItems"), int) and len(value) > schema["maxItems"]:
        errors.append(f"{path}: must hold at most {schema['maxItems']} items")
    if schema.get("uniqueItems") is True:
        seen: list[Any] = []
        for item in value:
            if any(_json_equal(item, earlier) for earlier in seen):
                errors.append(f"{path}: items must be unique; {_short(item)} repeats")
                break
            seen.append(item)
    return errors


def _object_errors(
    value: dict[str, Any], schema: Mapping[str, Any], root: Any, path: str, hops: int
) -> list[str]:
    errors = []
    properties = schema.get("properties") or {}
    if not isinstance(properties, Mapping):
        raise ToolError(f"Tool schema 'properties' at {path} must be an object.")
    for name in schema.get("required") or []:
        if name not in value:
            errors.append(f"{_child(path, name)}: missing required argument")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            errors += _errors(item, properties[name], root, _child(path, name), 0)
        elif extra is False:
            known = ", ".join(properties) or "none"
            errors.append(f"{_child(path, name)}: unexpected argument (known: {known})")
        elif extra is not True:
            errors += _errors(item, extra, root, _child(path, name), 0)
    return errors


def _combinator_errors(
    value: Any, schema: Mapping[str, Any], root: Any, path: str, hops: int
) -> list[str]:
    errors = []
    for branch in _branches(schema, "allOf", path):
        errors += _errors(value, branch, root, path, hops)
    any_of = _branches(schema, "anyOf", path)
    if any_of:
        failures = [_errors(value, branch, root, path, hops) for branch in any_of]
        if all(failures):
            reasons = " | ".join("; ".join(f) for f in failures)
            errors.append(f"{path}: matches none of the allowed forms ({reasons})")
    one_of = _branches(schema, "oneOf", path)
    if one_of:
        failures = [_errors(value, branch, root, path, hops) for branch in one_of]
        passing = sum(1 for f in failures if not f)
        if passing == 0:
            reasons = " | ".join("; ".join(f) for f in failures)
            errors.append(f"{path}: matches none of the allowed forms ({reasons})")
        elif passing > 1:
            errors.append(f"{path}: matches {passing} of the exclusive forms; it must match one")
    if "not" in schema and not _errors(value, schema["not"], root, path, hops):
        errors.append(f"{path}: {_short(value)} is a form that is not allowed here")
    return errors


def _branches(schema: Mapping[str, Any], keyword: str, path: str) -> list[Any]:
    branches = schema.get(keyword)
    if branches is None:
        return []
    if not isinstance(branches, list) or not branches:
        raise ToolError(f"Tool schema '{keyword}' at {path} must be a non-empty list of schemas.")
    return branches


def _json_equal(a: Any, b: Any) -> bool:
    """Equality in JSON's sense: ``True`` is not ``1``, but ``1`` equals ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, Sequence) and isinstance(b, Sequence) and not isinstance(a, str):
        if isinstance(b, str) or len(a) != len(b):
            return False
        return all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if _IDENTIFIER.match(name) else f"{path}[{json.dumps(name)}]"


def _json_text(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value: Any) -> str:
    """A value as the model wrote it, cut short and named by its JSON type, for error messages."""
    if value is None:
        return "null"
    kinds = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}
    kind = kinds.get(type(value), "object" if isinstance(value, dict) else type(value).__name__)
    return f"{kind} {_json_text(value)}"
