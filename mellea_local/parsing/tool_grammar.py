"""The tool-call grammar: what a constrained agent step may write (llguidance Lark).

Why: a small model that was never trained on tool calls writes malformed calls, names tools
that were not offered and passes arguments of the wrong type; each such step is wasted. Under
this grammar a step's output is, exactly::

    [<think> free text without '<' </think>]  <tool_call> {"name": N, "arguments": A} </tool_call>

where ``N`` is one of the offered tools (``final_answer`` included, when offered) and ``A``
satisfies that tool's JSON schema. It is the format ``parsing.response`` reads back and
``rendering.tool_prompt`` writes into the prompt, so a malformed call cannot be produced.
Every value is bounded too (``_bounded``: strings ``MAX_STRING_CHARS``, numbers within
``NUMBER_BOUND`` with at most six decimals, arrays ``MAX_ARRAY_ITEMS``, a thought
``MAX_THOUGHT_CHARS``), so a call cannot run on forever, and the decoder keeps
``closing_reserve`` tokens before ``max_new_tokens`` in which it only closes the call
(``GrammarLogitsProcessor``'s closing mode), so it is not cut off at the limit either.

The arguments are written with ``json.dumps``'s separators (``": "``, ``", "``), the
envelope's whitespace is free but bounded, and the keys' order is the one the format shows
(``name``, then ``arguments``): a model whose greedy output is already a valid call decodes
the same tokens with and without the grammar (the mask only removes tokens the grammar
forbids, never reorders the rest), which ``tests/parsing/test_tool_grammar.py`` and
``tests/react/test_react_real.py`` check.

When it is on (``constrain_tool_calls``): ``ModelOption.CONSTRAIN_TOOL_CALLS`` decides when
set; unset, it is on exactly when the chat template has no tool slot (the Hermes fallback
format: the model was not trained on a tool format, so it needs the grammar), and off for a
template with its own tool format (its model writes that format, which this grammar may not
describe).
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from mellea_local.errors import ConstrainedDecodingError
from mellea_local.options import ModelOption
from mellea_local.rendering.tool_prompt import template_renders_tools

__all__ = [
    "MAX_ARRAY_ITEMS",
    "MAX_STRING_CHARS",
    "MAX_THOUGHT_CHARS",
    "NUMBER_BOUND",
    "NUMBER_STEP",
    "closing_reserve",
    "constrain_tool_calls",
    "tool_call_grammar",
]

MAX_THOUGHT_CHARS = 600
"""A thinking block is at most this long under the grammar, so it cannot eat the budget."""

MAX_STRING_CHARS = 120
"""A string argument without a length bound of its own is at most this long under the grammar:
SmolLM2 wrote on inside a string until the token limit cut the call off (an invalid call)."""
NUMBER_BOUND = 1e15
"""A number without bounds of its own lies in [-NUMBER_BOUND, NUMBER_BOUND] under the grammar
(at most 16 integer digits, no exponent) ..."""
NUMBER_STEP = 1e-6
"""... and a ``number`` without ``multipleOf`` has at most six decimals: digits written on
forever are impossible, so every value ends within a few tokens."""
MAX_ARRAY_ITEMS = 16
"""An array without ``maxItems`` holds at most this many items under the grammar."""

_WS = r"/[ \t\n]{1,4}/"
FREE_TEXT_PATTERN = r"^[^<>{}]+$"
"""What a required free-text string argument may hold under the grammar (see ``_closed``)."""


def constrain_tool_calls(options: Mapping[str, Any], tokenizer: Any) -> bool:
    """Whether a tool-calling step is decoded under the grammar (see the module docstring)."""
    value = options.get(ModelOption.CONSTRAIN_TOOL_CALLS)
    if value is not None:
        return bool(value)
    return not template_renders_tools(tokenizer)


def _tag(tokenizer: Any, text: str) -> str:
    """A tag as a Lark terminal: its token when the tokenizer has it as an added token (the
    embedded model's ``<tool_call>``; llguidance treats added tokens as special, never as
    text), else its text."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    if len(ids) == 1 and ids[0] in added:
        return f"<[{ids[0]}]>"
    return json.dumps(text)


def _closed(node: Any) -> Any:
    """The schema with ``additionalProperties: false`` on every object that does not say, and
    required free-text strings non-empty and free of tags and braces.

    JSON Schema allows unnamed keys by default, and a small model under a grammar that allows
    them fills them with the schema's own words (``"type"``, ``"description"``); the tools
    refuse unnamed arguments (``parsing.tool_schema``), so the grammar does too.
    """
    if isinstance(node, list):
        return [_closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: (_closed(value) if key in _SUBSCHEMAS else
                 {k: _closed(v) for k, v in value.items()}
                 if key in _SCHEMA_MAPS and isinstance(value, dict) else value)
           for key, value in node.items()}
    if (out.get("type") == "object" or "properties" in out) and (
            "additionalProperties" not in out):
        out["additionalProperties"] = False
    # A required free-text string is non-empty and holds no tag or brace: SmolLM2 answered
    # ``{"answer": "}}</tool_call>...`` and wrote on inside the string until cut off.
    for name in out.get("required") or []:
        prop = (out.get("properties") or {}).get(name)
        if isinstance(prop, dict) and prop.get("type") == "string" and not (
                {"minLength", "maxLength", "enum", "const", "pattern", "format"} & set(prop)):
            out["properties"][name] = {**prop, "pattern": FREE_TEXT_PATTERN}
    return _bounded(out)


def _bounded(node: dict[str, Any]) -> dict[str, Any]:
    """Every string, number and array of the schema bounded in length (its own bounds kept),
    so that no value can run on until the token limit cuts the call off."""
    kind = node.get("type")
    if "enum" in node or "const" in node:
        return node
    if kind == "string" and "maxLength" not in node and "format" not in node:
        node["maxLength"] = MAX_STRING_CHARS
    elif kind in ("number", "integer"):
        if "minimum" not in node and "exclusiveMinimum" not in node:
            node["minimum"] = -NUMBER_BOUND
        if "maximum" not in node and "exclusiveMaximum" not in node:
            node["maximum"] = NUMBER_BOUND
        if kind == "number" and "multipleOf" not in node:
            node["multipleOf"] = NUMBER_STEP
    elif kind == "array" and "maxItems" not in node:
        node["maxItems"] = MAX_ARRAY_ITEMS
    return node


_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMAS = ("items", "anyOf", "oneOf", "allOf", "prefixItems", "not", "additionalProperties")


def _least(node: Any) -> Any:
    """The shortest value a schema admits, near enough: a required key each, one character
    a string, 0 a number, the first of an enum."""
    if not isinstance(node, dict):
        return None
    if "const" in node:
        return node["const"]
    if node.get("enum"):
        return node["enum"][0]
    branches = node.get("anyOf") or node.get("oneOf")
    if branches:
        return _least(branches[0])
    kind = node.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object" or "properties" in node:
        props = node.get("properties") or {}
        return {k: _least(props.get(k, {})) for k in node.get("required") or []}
    return {"string": "x", "number": 0, "integer": 0, "boolean": False, "array": []}.get(str(kind))


def closing_reserve(specs: Sequence[Mapping[str, Any]], tokenizer: Any) -> tuple[int, int]:
    """``(in a thought, in the call)``: the tokens a constrained step keeps for closing (the
    decoder's *closing mode*, ``GrammarLogitsProcessor(budget=, reserve=)``).

    In a thought, closing means ending it and writing the shortest call of the longest
    offered tool; in the call, a quote, the remaining shortest arguments, the braces and the
    closing tag. Each is that text's length in tokens, for the worst tool, plus EOS and a
    margin of four."""
    thought = call = 0
    for spec in specs:
        fn = spec.get("function", spec)
        args = json.dumps(_least(fn.get("parameters") or {}) or {}, ensure_ascii=False)
        shortest = json.dumps({"name": fn["name"], "arguments": json.loads(args)},
                              ensure_ascii=False)
        thought = max(thought, len(tokenizer.encode(
            f"</think>\n<tool_call>\n{shortest}\n</tool_call>", add_special_tokens=False)))
        call = max(call, len(tokenizer.encode(
            f'", {args[1:]}}}\n</tool_call>', add_special_tokens=False)))
    return thought + 5, call + 5


def _arguments_schema(spec: Mapping[str, Any]) -> dict[str, Any]:
    fn = spec.get("function", spec)
    params = fn.get("parameters") if isinstance(fn, Mapping) else None
    schema = _closed(copy.deepcopy(dict(params)) if isinstance(params, Mapping) else {})
    schema.setdefault("type", "object")
    # The separators ``json.dumps`` writes (": ", ", "), the ones the format's example, the
    # agent traces and small models' own calls use; free whitespace let a small model
    # indent and wander until the token limit cut the call off.
    schema["x-guidance"] = {"whitespace_flexible": False, "key_separator": ": ",
                            "item_separator": ", "}
    return schema


def tool_call_grammar(
    specs: Sequence[Mapping[str, Any]],
    *,
    tokenizer: Any = None,
    thinking: str = "optional",
) -> str:
    """The llguidance grammar of one step: optional thinking, then one call to a tool in
    ``specs`` (``{"type": "function", "function": {...}}`` dicts) with valid arguments.

    ``thinking``: ``"optional"`` (a ``<think>`` block may come first), ``"none"`` (no
    block), ``"open"`` (the prompt already opened ``<think>``: the step starts inside it).
    ``tokenizer`` lets tags it has as special tokens (the embedded model's ``<tool_call>``)
    be matched as those tokens. Raises
    ``ConstrainedDecodingError`` naming the tool whose schema llguidance cannot compile.
    """
    if thinking not in ("optional", "none", "open"):
        raise ConstrainedDecodingError(
            f"thinking must be 'optional', 'none' or 'open', got {thinking!r}.")
    if not specs:
        raise ConstrainedDecodingError(
            "A tool-call grammar needs at least one tool; offer tools or turn "
            "ModelOption.CONSTRAIN_TOOL_CALLS off.")
    names = [str(s.get("function", s)["name"]) for s in specs]
    # Key order kept (no sort_keys): the schema's property order is the order it demands.
    key = json.dumps([list(specs), thinking], default=str)
    tags = ("<think>", "</think>", "<tool_call>", "</tool_call>")
    terminals = tuple(_tag(tokenizer, t) if tokenizer is not None else json.dumps(t)
                      for t in tags)
    return _grammar(key, tuple(names), terminals)


@functools.lru_cache(maxsize=64)
def _grammar(key: str, names: tuple[str, ...], terminals: tuple[str, ...]) -> str:
    from llguidance import LLMatcher

    specs, thinking = json.loads(key)
    think_open, think_close, call_open, call_close = terminals
    head = {"optional": "think? ", "none": "", "open": f"THOUGHT {think_close} WS? "}[thinking]
    lines = [
        f"start: {head}{call_open} WS? call WS? {call_close}",
        f"think: {think_open} THOUGHT {think_close} WS?",
        f"THOUGHT: /[^<]{{0,{MAX_THOUGHT_CHARS}}}/",
        f"WS: {_WS}",
        'call: "{" WS? "\\"name\\"" WS? ":" WS? ' + "(" + " | ".join(
            f"call_{i}" for i in range(len(specs))) + ') WS? "}"',
    ]
    for i, (name, spec) in enumerate(zip(names, specs, strict=True)):
        schema = _arguments_schema(spec)
        try:
            problem = LLMatcher.validate_grammar(
                LLMatcher.grammar_from_json_schema(json.dumps(schema)))
        except ValueError as exc:
            problem = str(exc)
        if problem:
            raise ConstrainedDecodingError(
                f"The JSON schema of tool {name!r} cannot be compiled into a grammar "
                f"({problem}); simplify its parameters, or turn constrained tool calls off "
                "with ModelOption.CONSTRAIN_TOOL_CALLS=False.")
        lines.append(f'call_{i}: {json.dumps(json.dumps(name))} WS? "," WS? '
                     f'"\\"arguments\\"" WS? ":" WS? args_{i}')
        lines.append(f"args_{i}: %json {json.dumps(schema)}")
    return "\n".join(lines) + "\n"
