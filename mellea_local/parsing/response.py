"""Model text -> content, thinking and tool calls.

The models we serve write an optional ``<think>...</think>`` block, then content and/or
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks; some write a bare JSON call
``{"name": ..., "arguments": {...}}`` as the whole reply. Two rules come from the peer's traps:

* Thinking is split off **first**, so JSON the model muses about while reasoning can never turn
  into a tool call.
* Tool-call arguments keep the exact text the model wrote (the peer collapsed all whitespace,
  changing string arguments), and a call that names an unknown tool or breaks its schema is kept
  with an ``error`` the agent loop can show the model: never dropped, never repaired, never
  coerced.

``parse_with_tokenizer`` prefers the tokenizer's own ``response_template`` (transformers'
``parse_response`` machinery) and falls back to the built-in parser when there is none or when it
cannot cope with the text.
"""

from __future__ import annotations

import json
import logging
import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mellea_local.errors import InvalidInputError
from mellea_local.parsing.tool_schema import validate_arguments

__all__ = [
    "THINK_CLOSE",
    "THINK_OPEN",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "ParsedResponse",
    "ParsedToolCall",
    "parse_response",
    "parse_with_tokenizer",
    "split_thinking",
]

logger = logging.getLogger(__name__)

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

# Field names a response template may use for the reasoning region.
_THINKING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_CALL_KEYS = frozenset({"name", "arguments"})
_NAME_HINT = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')


@dataclass
class ParsedToolCall:
    """One tool call as the model wrote it.

    ``raw_arguments`` is the exact text of the arguments object (replaying it keeps the rendered
    history byte-identical, which KV-prefix reuse depends on). ``error`` is None for a call that
    may run; otherwise it says what is wrong in words meant for the model.
    """

    name: str
    arguments: dict[str, Any]
    raw_arguments: str
    id: str
    error: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI-shaped dict chat templates and the rendering stage expect."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.raw_arguments},
        }


@dataclass
class ParsedResponse:
    """What a model reply says, split into its parts.

    ``thinking`` is None when the reply has no thinking block and ``""`` for an empty one.
    ``truncated_thinking`` means the thinking block never closed: the reply was cut off while
    reasoning, so the backend reports ``finish_reason="length"``.
    """

    content: str
    thinking: str | None
    tool_calls: list[ParsedToolCall] = field(default_factory=list)
    truncated_thinking: bool = False


@dataclass
class _Draft:
    """A call as found in the text, before ids and the tool list are applied."""

    name: str
    arguments: dict[str, Any]
    raw_arguments: str
    problem: str | None = None


def split_thinking(text: str, *, thinking_started: bool = False) -> tuple[str | None, str, bool]:
    """Split ``text`` into ``(thinking, rest, truncated)`` on the first ``</think>``.

    With ``thinking_started`` the prompt already opened ``<think>``, so ``text`` begins inside
    the block; otherwise a block counts only when ``<think>`` opens the reply. A block that never
    closes swallows the whole text, because anything after an unclosed ``<think>`` is reasoning.
    """
    if not thinking_started:
        stripped = text.lstrip()
        if not stripped.startswith(THINK_OPEN):
            return None, text, False
        text = stripped[len(THINK_OPEN) :]
    reasoning, closed, rest = text.partition(THINK_CLOSE)
    if not closed:
        return text.strip(), "", True
    return reasoning.strip(), rest, False


def parse_response(
    text: str,
    *,
    tools: Mapping[str, Mapping[str, Any]] | None = None,
    thinking_started: bool = False,
) -> ParsedResponse:
    """Parse a model reply with the built-in parser.

    ``tools`` maps each available tool name to its JSON-schema function spec; when given, calls
    to other names and arguments that break the schema carry an ``error``. Without it calls are
    only checked for well-formed JSON. Raises ``ToolError`` only for a malformed tool schema
    (a bug in the tool definition); any model text parses.
    """
    thinking, rest, truncated = split_thinking(text, thinking_started=thinking_started)
    content, drafts = _extract_calls(rest)
    return ParsedResponse(
        content=content,
        thinking=thinking,
        tool_calls=_finish(drafts, tools),
        truncated_thinking=truncated,
    )


def parse_with_tokenizer(
    text: str,
    tokenizer: Any,
    *,
    tools: Mapping[str, Mapping[str, Any]] | None = None,
    thinking_started: bool = False,
    prefix: str | None = None,
) -> ParsedResponse:
    """Parse with the tokenizer's ``response_template`` when it has one, else built-in.

    ``prefix`` is the decoded prompt; transformers needs it to see what the template pre-wrote
    (an opening ``<think>``). Without it, one is made from the template's start anchor and
    ``thinking_started``. Tool calls are validated exactly as ``parse_response`` does; the
    tokenizer is never given the tools, because transformers would then cast arguments.
    If the template parser raises on this text, the built-in parser answers instead.
    """
    template = getattr(tokenizer, "response_template", None)
    if not isinstance(template, Mapping) or not hasattr(tokenizer, "get_response_parser"):
        return parse_response(text, tools=tools, thinking_started=thinking_started)
    if prefix is None:
        prefix = _anchor_literal(template) + (THINK_OPEN if thinking_started else "")
    try:
        content, thinking, drafts, truncated = _parse_with_template(text, tokenizer, prefix)
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        logger.debug("response_template parser failed (%s); using the built-in parser", exc)
        return parse_response(text, tools=tools, thinking_started=thinking_started)
    if not drafts and (bare := _bare_call(content)) is not None:
        content, drafts = "", [bare]
    return ParsedResponse(
        content=content,
        thinking=thinking,
        tool_calls=_finish(drafts, tools),
        truncated_thinking=truncated,
    )


# --- built-in tool-call extraction -------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise InvalidInputError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise InvalidInputError(f"{text} does not fit in a float")
    return number


# NaN, Infinity and 1e999 (which Python reads as inf) are not JSON numbers a tool can use.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def _decode_at(text: str, start: int) -> tuple[Any, int] | None:
    """Decode one JSON value at ``start``; None when there is none."""
    try:
        return _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        return None


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t\n\r":
        index += 1
    return index


def _extract_calls(rest: str) -> tuple[str, list[_Draft]]:
    """Cut the ``<tool_call>`` blocks out of ``rest``; the text left over is the content."""
    pieces: list[str] = []
    drafts: list[_Draft] = []
    position = 0
    while (start := rest.find(TOOL_CALL_OPEN, position)) != -1:
        pieces.append(rest[position:start])
        body_start = start + len(TOOL_CALL_OPEN)
        body_end, after = _block_end(rest, body_start)
        drafts.append(_read_call(rest[body_start:body_end], closed=after is not None))
        position = after if after is not None else len(rest)
    pieces.append(rest[position:])
    content = "".join(pieces).strip()
    if not drafts and (bare := _bare_call(content)) is not None:
        return "", [bare]
    return content, drafts


def _block_end(text: str, body_start: int) -> tuple[int, int | None]:
    """Where a call body ends, and where the text after ``</tool_call>`` starts (None if unclosed).

    A well-formed JSON body is decoded first so a ``</tool_call>`` inside a string argument does
    not end the block early; only a malformed body falls back to the first closing tag.
    """
    decoded = _decode_at(text, _skip_space(text, body_start))
    if decoded is not None:
        end = _skip_space(text, decoded[1])
        if text.startswith(TOOL_CALL_CLOSE, end):
            return end, end + len(TOOL_CALL_CLOSE)
    close = text.find(TOOL_CALL_CLOSE, body_start)
    if close == -1:
        return len(text), None
    return close, close + len(TOOL_CALL_CLOSE)


def _read_call(body: str, *, closed: bool) -> _Draft:
    """Turn one call body into a draft; a body we cannot read becomes a draft with a problem."""
    start = _skip_space(body, 0)
    decoded = _decode_at(body, start)
    if decoded is None or _skip_space(body, decoded[1]) != len(body):
        hint = _NAME_HINT.search(body)
        name = _unescape(hint.group(1)) if hint else ""
        if closed:
            problem = (
                "The <tool_call> block does not hold one valid JSON object. Write it as "
                '<tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>.'
            )
        else:
            problem = (
                "The <tool_call> block is not closed and its JSON is incomplete (the reply may "
                "have been cut off). Write the whole call, ending with </tool_call>."
            )
        return _Draft(name, {}, body.strip(), problem)
    return _draft_from_object(body, start, decoded[0])


def _draft_from_object(text: str, start: int, call: Any) -> _Draft:
    """Check the call object's shape and locate the exact text of its arguments."""
    usage = 'Write tool calls as {"name": "<tool name>", "arguments": {...}}.'
    if not isinstance(call, dict):
        return _Draft("", {}, text.strip(), f"A tool call must be a JSON object. {usage}")
    name = call.get("name")
    if not isinstance(name, str) or not name:
        return _Draft("", {}, text.strip(), f'The tool call has no "name" string. {usage}')
    unexpected = sorted(set(call) - _CALL_KEYS)
    if unexpected:
        return _Draft(
            name,
            {},
            text.strip(),
            f"The call to {name!r} has unexpected key(s) {unexpected}; put every argument "
            f'inside "arguments". {usage}',
        )
    if "arguments" not in call:
        return _Draft(name, {}, "{}")  # a call without arguments, e.g. a tool with no parameters
    arguments = call["arguments"]
    span = _member_spans(text, start).get("arguments")
    raw = text[span[0] : span[1]] if span else json.dumps(arguments, ensure_ascii=False)
    if not isinstance(arguments, dict):
        kind = "a JSON-encoded string" if isinstance(arguments, str) else type(arguments).__name__
        return _Draft(
            name,
            {},
            raw,
            f'The "arguments" of the call to {name!r} must be a JSON object, not {kind}. {usage}',
        )
    return _Draft(name, arguments, raw)


def _member_spans(text: str, start: int) -> dict[str, tuple[int, int]]:
    """Character spans of each top-level member value of the JSON object at ``start``.

    Only called on text that already decoded as an object, so the walk cannot go wrong; the
    last duplicate key wins, as in ``json.loads``.
    """
    spans: dict[str, tuple[int, int]] = {}
    index = _skip_space(text, start + 1)  # past "{"
    while index < len(text) and text[index] != "}":
        key, index = json.decoder.scanstring(text, index + 1)
        index = _skip_space(text, _skip_space(text, index) + 1)  # past ":"
        decoded = _decode_at(text, index)
        if decoded is None:  # pragma: no cover - the object decoded as a whole
            break
        spans[key] = (index, decoded[1])
        index = _skip_space(text, decoded[1])
        if index < len(text) and text[index] == ",":
            index = _skip_space(text, index + 1)
    return spans


def _bare_call(content: str) -> _Draft | None:
    """A whole reply that is exactly ``{"name": ..., "arguments": {...}}`` is a call.

    Stricter than a tag block on purpose: plain JSON content (say, a user asked for a record
    with a "name" field) must not turn into a call, so both keys and nothing else are required.
    """
    if not (content.startswith("{") and content.endswith("}")):
        return None
    decoded = _decode_at(content, 0)
    if decoded is None or decoded[1] != len(content):
        return None
    call = decoded[0]
    if not isinstance(call, dict) or set(call) != _CALL_KEYS or not isinstance(call["name"], str):
        return None
    if not isinstance(call["arguments"], dict):
        return None
    return _draft_from_object(content, 0, call)


def _unescape(json_string_body: str) -> str:
    try:
        return json.loads(f'"{json_string_body}"')
    except ValueError:
        return json_string_body


# --- ids and validation ------------------------------------------------------------------------


def _finish(
    drafts: list[_Draft], tools: Mapping[str, Mapping[str, Any]] | None
) -> list[ParsedToolCall]:
    """Give every draft an id and check it against the tool list."""
    calls: list[ParsedToolCall] = []
    used: set[str] = set()
    for draft in drafts:
        error = draft.problem
        if error is None and tools is not None:
            error = _tool_problem(draft, tools)
        calls.append(
            ParsedToolCall(draft.name, draft.arguments, draft.raw_arguments, _new_id(used), error)
        )
    return calls


def _new_id(used: set[str]) -> str:
    # Random, not derived from the text: a ReACT loop that repeats the same call in two turns
    # must still give the two tool results distinct ids in one history.
    while (call_id := f"call_{secrets.token_hex(4)}") in used:
        continue  # pragma: no cover - a 32-bit collision within one reply
    used.add(call_id)
    return call_id


def _tool_problem(draft: _Draft, tools: Mapping[str, Mapping[str, Any]]) -> str | None:
    spec = tools.get(draft.name)
    if spec is None:
        if not tools:
            return (
                f"There is no tool {draft.name!r}: no tools are available here. "
                "Answer in plain text."
            )
        available = ", ".join(sorted(tools))
        return (
            f"There is no tool {draft.name!r}. Available tools: {available}. "
            "Call one of them by its exact name."
        )
    errors = validate_arguments(draft.arguments, spec)
    if not errors:
        return None
    return (
        f"Invalid arguments for tool {draft.name!r}: {'; '.join(errors)}. "
        "Call it again with arguments that match its parameters."
    )


# --- the tokenizer's response template ---------------------------------------------------------


def _anchor_literal(template: Mapping[str, Any]) -> str:
    """The template's literal start anchor, so a made-up prefix lands inside the reply."""
    anchor = template.get("start_anchor")
    if isinstance(anchor, list) and anchor and isinstance(anchor[0], str):
        return anchor[0]
    return anchor if isinstance(anchor, str) else ""


def _parse_with_template(
    text: str, tokenizer: Any, prefix: str
) -> tuple[str, str | None, list[_Draft], bool]:
    """Run transformers' streaming response parser and map its regions onto our result.

    The streaming parser, not ``tokenizer.parse_response``, because its events carry each
    region's raw text: that is where the exact argument strings come from, and a thinking
    region still open when the text ends is how truncation shows.
    """
    parser = tokenizer.get_response_parser(prefix=prefix)
    events = [*parser.initial_events, *parser.feed(text)]
    still_open = _open_region(events)
    message, final_events = parser.finalize()
    events += final_events

    drafts: list[_Draft] = []
    thinking: str | None = None
    raw_body: list[str] = []
    for event in events:
        kind = event.get("type")
        if kind == "region_open":
            raw_body = []
        elif kind == "region_chunk":
            raw_body.append(event.get("text", ""))
        elif kind == "region_close":
            value = event.get("value")
            if event.get("field") in _THINKING_FIELDS and isinstance(value, str):
                thinking = value.strip()
            elif event.get("field") == "tool_calls":
                drafts += _drafts_from_region(value, "".join(raw_body))
            raw_body = []

    for name in _THINKING_FIELDS:
        if isinstance(message.get(name), str):
            thinking = message[name].strip()
            break
    content = message.get("content")
    content = content.strip() if isinstance(content, str) else ""
    return content, thinking, drafts, still_open in _THINKING_FIELDS


def _open_region(events: list[dict[str, Any]]) -> str | None:
    current: str | None = None
    for event in events:
        if event.get("type") == "region_open":
            current = event.get("field")
        elif event.get("type") == "region_close":
            current = None
    return current


def _drafts_from_region(value: Any, raw_body: str) -> list[_Draft]:
    """The tool calls in one closed ``tool_calls`` region; never fewer than the model wrote.

    When the region's raw text is JSON (our format), it is read exactly as the built-in parser
    reads a block, which keeps the argument text and applies the same shape checks. Otherwise
    (an XML- or Python-style template) the template's parsed value is used and the arguments
    are re-serialised, since no JSON text of them exists.
    """
    start = _skip_space(raw_body, 0)
    decoded = _decode_at(raw_body, start)
    if decoded is not None and _skip_space(raw_body, decoded[1]) == len(raw_body):
        return [_draft_from_object(raw_body, start, decoded[0])]
    items = value if isinstance(value, list) else [value]  # [] when the model wrote no call
    return [_draft_from_value(item, raw_body) for item in items]


def _draft_from_value(item: Any, raw_body: str) -> _Draft:
    call = _as_call(item)
    if call is None:
        return _Draft(
            "",
            {},
            raw_body.strip(),
            "The tool call could not be read as a tool name with arguments. Write it as "
            '<tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>.',
        )
    name, arguments = call
    if not isinstance(arguments, dict):
        return _Draft(
            name,
            {},
            raw_body.strip(),
            f'The "arguments" of the call to {name!r} must be a JSON object.',
        )
    return _Draft(name, arguments, json.dumps(arguments, ensure_ascii=False))


def _as_call(item: Any) -> tuple[str, Any] | None:
    """``(name, arguments)`` from ``{"function": {...}}`` or ``{"name", "arguments"}``."""
    if not isinstance(item, dict):
        return None
    function = item.get("function", item)
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return None
    return function["name"], function.get("arguments", {})
