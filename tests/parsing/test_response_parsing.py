"""The built-in parser: thinking first, then tool calls, arguments kept exactly as written."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mellea_local.errors import ToolError
from mellea_local.parsing import ParsedResponse, parse_response, split_thinking
from mellea_local.parsing.tool_schema import validate_arguments

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "default": 1, "minimum": 1},
            "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
        },
        "required": ["city"],
    },
}
SEARCH = {
    "name": "search",
    "description": "Search the web.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
}
TOOLS = {"get_weather": WEATHER, "search": SEARCH}
CALL_ID = re.compile(r"call_[0-9a-f]{8}\Z")


def render_call(name: str, raw_arguments: str) -> str:
    return f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {raw_arguments}}}</tool_call>'


# --- thinking ----------------------------------------------------------------------------------


def test_thinking_is_split_before_tool_calls() -> None:
    text = (
        '<think>I could call <tool_call>{"name": "search", "arguments": {"query": "no"}}'
        '</tool_call> or answer {"name": "search", "arguments": {}}.</think>\n\nThe answer.'
    )
    parsed = parse_response(text, tools=TOOLS)
    assert parsed.tool_calls == []
    assert parsed.content == "The answer."
    assert parsed.thinking is not None and parsed.thinking.startswith("I could call <tool_call>")
    assert parsed.truncated_thinking is False


def test_braces_inside_thinking_with_a_real_call_after() -> None:
    text = (
        '<think>{"name": "get_weather", "arguments": {"city": "Rome"}} {{ }</think>'
        + render_call("get_weather", '{"city": "Oslo"}')
    )
    parsed = parse_response(text, tools=TOOLS)
    assert [c.arguments for c in parsed.tool_calls] == [{"city": "Oslo"}]
    assert parsed.thinking == '{"name": "get_weather", "arguments": {"city": "Rome"}} {{ }'


def test_thinking_started_means_the_text_begins_inside_the_block() -> None:
    parsed = parse_response("weighing options</think>  Done.  ", thinking_started=True)
    assert (parsed.thinking, parsed.content, parsed.truncated_thinking) == (
        "weighing options",
        "Done.",
        False,
    )


def test_unclosed_thinking_is_all_thinking_and_truncated() -> None:
    text = 'still thinking <tool_call>{"name": "search", "arguments": {}}</tool_call> and'
    parsed = parse_response(text, tools=TOOLS, thinking_started=True)
    assert parsed == ParsedResponse(content="", thinking=text.strip(), truncated_thinking=True)
    opened = parse_response("<think>never closed {", tools=TOOLS)
    assert (opened.thinking, opened.truncated_thinking, opened.tool_calls) == (
        "never closed {",
        True,
        [],
    )


def test_split_on_the_first_close_tag_only() -> None:
    assert split_thinking("<think>a</think>b</think>c") == ("a", "b</think>c", False)


def test_think_tag_later_in_the_reply_is_content() -> None:
    parsed = parse_response("Use <think> tags like <think>this</think>.")
    assert parsed.thinking is None
    assert parsed.content == "Use <think> tags like <think>this</think>."


def test_empty_thinking_block_is_empty_string_not_none() -> None:
    assert parse_response("<think>\n\n</think>\n\nHi").thinking == ""
    assert parse_response("Hi").thinking is None


# --- tool calls ----------------------------------------------------------------------------------


def test_two_calls_keep_order_exact_raw_text_and_distinct_ids() -> None:
    first = '{"city":   "New  York",\n  "days": 3}'
    second = '{ "query" : "a\\tb  c" }'
    text = (
        "Let me check.\n" + render_call("get_weather", first) + "\n" + render_call("search", second)
    )
    parsed = parse_response(text, tools=TOOLS)
    assert parsed.content == "Let me check."
    assert [(c.name, c.raw_arguments, c.error) for c in parsed.tool_calls] == [
        ("get_weather", first, None),
        ("search", second, None),
    ]
    assert parsed.tool_calls[0].arguments == {"city": "New  York", "days": 3}
    assert parsed.tool_calls[1].arguments == {"query": "a\tb  c"}
    ids = [c.id for c in parsed.tool_calls]
    assert len(set(ids)) == 2 and all(CALL_ID.match(i) for i in ids)


def test_nested_braces_and_close_tag_inside_string_arguments() -> None:
    raw = '{"query": "if (x) { y = {}; } </tool_call> done }"}'
    parsed = parse_response(render_call("search", raw) + " after", tools=TOOLS)
    (call,) = parsed.tool_calls
    assert call.raw_arguments == raw
    assert call.arguments["query"] == "if (x) { y = {}; } </tool_call> done }"
    assert call.error is None
    assert parsed.content == "after"


def test_optional_parameters_absent_are_not_padded() -> None:
    (call,) = parse_response(render_call("get_weather", '{"city": "Oslo"}'), tools=TOOLS).tool_calls
    assert call.arguments == {"city": "Oslo"}
    assert call.error is None


def test_unknown_tool_is_kept_with_an_error_naming_the_tools() -> None:
    (call,) = parse_response(render_call("weather", '{"city": "Oslo"}'), tools=TOOLS).tool_calls
    assert (call.name, call.arguments) == ("weather", {"city": "Oslo"})
    assert call.error is not None
    assert "'weather'" in call.error and "get_weather, search" in call.error


def test_no_tools_available_is_reported() -> None:
    (call,) = parse_response(render_call("search", "{}"), tools={}).tool_calls
    assert call.error is not None and "no tools are available" in call.error


def test_without_a_tool_list_names_and_schemas_are_not_checked() -> None:
    (call,) = parse_response(render_call("anything", '{"x": "1"}')).tool_calls
    assert (call.name, call.arguments, call.error) == ("anything", {"x": "1"}, None)


def test_schema_failure_keeps_the_arguments_as_written() -> None:
    raw = '{"city": "Oslo", "days": "3"}'
    (call,) = parse_response(render_call("get_weather", raw), tools=TOOLS).tool_calls
    assert call.arguments == {"city": "Oslo", "days": "3"}  # no coercion to 3
    assert call.raw_arguments == raw
    assert call.error is not None
    assert 'arguments.days: expected integer, got string "3"' in call.error


def test_unclosed_block_with_incomplete_json_is_kept_with_an_error() -> None:
    text = 'Calling. <tool_call>{"name": "get_weather", "arguments": {"city": "Os'
    parsed = parse_response(text, tools=TOOLS)
    (call,) = parsed.tool_calls
    assert parsed.content == "Calling."
    assert call.name == "get_weather"  # recovered from the text, not invented
    assert call.arguments == {}
    assert call.error is not None and "not closed" in call.error
    assert call.raw_arguments in text


def test_unclosed_block_with_complete_json_is_a_call() -> None:
    (call,) = parse_response(
        '<tool_call>{"name": "search", "arguments": {"query": "x"}}', tools=TOOLS
    ).tool_calls
    assert (call.arguments, call.error) == ({"query": "x"}, None)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ('{"name": "search", "arguments": {"query": "x"}', "valid JSON"),
        ('{"name": "search", "arguments": {"query": NaN}}', "valid JSON"),
        ('{"name": "search", "arguments": {"query": 1e999}}', "valid JSON"),
        ('{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}', "JSON-encoded string"),
        ('{"name": "search", "parameters": {"query": "x"}}', "unexpected key(s) ['parameters']"),
        ('["search", {"query": "x"}]', "must be a JSON object"),
        ('{"arguments": {"query": "x"}}', 'no "name"'),
    ],
)
def test_malformed_calls_are_kept_with_an_error(body: str, fragment: str) -> None:
    parsed = parse_response(f"<tool_call>{body}</tool_call>", tools=TOOLS)
    (call,) = parsed.tool_calls
    assert call.error is not None and fragment in call.error
    assert call.arguments == {}
    assert parsed.content == ""


def test_call_without_arguments_gets_an_empty_object() -> None:
    tools = {"now": {"name": "now", "description": "Current time."}}
    (call,) = parse_response('<tool_call>{"name": "now"}</tool_call>', tools=tools).tool_calls
    assert (call.arguments, call.raw_arguments, call.error) == ({}, "{}", None)


def test_bare_json_call_as_whole_content() -> None:
    raw = '{"city": "Oslo"}'
    parsed = parse_response(f'<think>hm</think>\n{{"name": "get_weather", "arguments": {raw}}}\n')
    (call,) = parsed.tool_calls
    assert (parsed.content, call.name, call.raw_arguments) == ("", "get_weather", raw)


def test_bare_json_with_other_keys_or_around_text_is_content() -> None:
    record = '{"name": "Ada", "arguments": {}, "born": 1815}'
    assert parse_response(record).tool_calls == []
    assert parse_response(record).content == record
    prose = 'Here: {"name": "search", "arguments": {}}'
    assert parse_response(prose).tool_calls == []


def test_bare_json_call_to_unknown_tool_carries_an_error() -> None:
    (call,) = parse_response('{"name": "fly", "arguments": {}}', tools=TOOLS).tool_calls
    assert call.error is not None and "'fly'" in call.error


def test_stray_close_tag_stays_in_content() -> None:
    assert parse_response("a </tool_call> b").content == "a </tool_call> b"


def test_to_openai_carries_the_raw_arguments() -> None:
    raw = '{"query":  "x"}'
    (call,) = parse_response(render_call("search", raw)).tool_calls
    assert call.to_openai() == {
        "id": call.id,
        "type": "function",
        "function": {"name": "search", "arguments": raw},
    }


def test_malformed_tool_schema_is_a_tool_error() -> None:
    broken = {"bad": {"name": "bad", "parameters": {"type": "thing"}}}
    with pytest.raises(ToolError, match="unknown type"):
        parse_response(render_call("bad", "{}"), tools=broken)


# --- properties ----------------------------------------------------------------------------------

_FRAGMENTS = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        "[",
        "]",
        '"name"',
        '"arguments"',
        ": ",
        ", ",
        '"',
        "\\",
        " ",
        "\n",
        '"get_weather"',
        '"search"',
        '{"city": "x"}',
        '{"query": 1}',
        "NaN",
        "1e999",
        "null",
    ]
)
_ANY_TEXT = st.lists(st.one_of(_FRAGMENTS, st.text(max_size=5)), max_size=30).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=_ANY_TEXT, thinking_started=st.booleans(), with_tools=st.booleans())
def test_any_text_parses(text: str, thinking_started: bool, with_tools: bool) -> None:
    tools = TOOLS if with_tools else None
    parsed = parse_response(text, tools=tools, thinking_started=thinking_started)

    assert isinstance(parsed.content, str)
    assert "<tool_call>" not in parsed.content  # every opened block became a call
    ids = [c.id for c in parsed.tool_calls]
    assert len(set(ids)) == len(ids) and all(CALL_ID.match(i) for i in ids)
    for call in parsed.tool_calls:
        assert call.raw_arguments == "{}" or call.raw_arguments in text  # never invented
        if call.error is None and tools is not None:
            assert validate_arguments(call.arguments, tools[call.name]) == []
    if parsed.truncated_thinking:
        assert (parsed.content, parsed.tool_calls) == ("", [])
    plain = not thinking_started and "<think>" not in text and "<tool_call>" not in text
    if plain and not parsed.tool_calls:  # no markup and not a bare JSON call: all content
        assert parsed.content == text.strip()
        assert parsed.thinking is None


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_LAYOUT = st.fixed_dictionaries(
    {
        "indent": st.sampled_from([None, 0, 2, "\t"]),
        "separators": st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :  ")]),
        "ensure_ascii": st.booleans(),
    }
)
_CALL = st.tuples(
    st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_.-]{0,15}\Z"),
    st.dictionaries(st.text(max_size=8), _JSON, max_size=4),
    _LAYOUT,
)
_PLAIN = st.text(max_size=20).filter(lambda s: "<think>" not in s and "<tool_call>" not in s)


@settings(max_examples=200, deadline=None)
@given(
    calls=st.lists(_CALL, min_size=1, max_size=3),
    content=_PLAIN,
    thinking=st.none() | _PLAIN.filter(lambda s: "</think>" not in s),
    thinking_started=st.booleans(),
    gaps=st.lists(st.sampled_from(["", "\n", " \n\n", "\t"]), min_size=3, max_size=3),
)
def test_rendered_calls_roundtrip_exactly(
    calls: list[tuple[str, dict[str, Any], dict[str, Any]]],
    content: str,
    thinking: str | None,
    thinking_started: bool,
    gaps: list[str],
) -> None:
    assume(not (thinking is None and thinking_started))
    raws = [json.dumps(arguments, **layout) for _, arguments, layout in calls]
    blocks = gaps[0].join(
        render_call(name, raw) for (name, _, _), raw in zip(calls, raws, strict=True)
    )
    head = ""
    if thinking is not None:
        head = ("" if thinking_started else "<think>") + thinking + "</think>" + gaps[1]
    text = head + content + gaps[2] + blocks

    parsed = parse_response(text, thinking_started=thinking_started)
    assert parsed.content == content.strip()
    assert parsed.thinking == (None if thinking is None else thinking.strip())
    assert [(c.name, c.arguments, c.raw_arguments, c.error) for c in parsed.tool_calls] == [
        (name, arguments, raw, None) for (name, arguments, _), raw in zip(calls, raws, strict=True)
    ]

    tools = {name: {"name": name, "parameters": {"type": "object"}} for name, _, _ in calls}
    assert all(
        c.error is None
        for c in parse_response(text, tools=tools, thinking_started=thinking_started).tool_calls
    )
