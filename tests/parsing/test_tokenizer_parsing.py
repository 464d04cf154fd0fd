"""parse_with_tokenizer: the tokenizer's response template first, else the built-in parser."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from mellea_local.parsing import ParsedResponse, parse_response, parse_with_tokenizer

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "default": 1},
        },
        "required": ["city"],
    },
}
TOOLS = {"get_weather": WEATHER}

# A template with other markers than ours: only a parser that reads the template can split it.
BRACKET_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "[ASSISTANT]",
    "fields": {
        "reasoning_content": {"open": "[THINK]", "close": "[/THINK]", "content": "text"},
        "tool_calls": {
            "open_pattern": r"\s*\[CALL\]",
            "close": "[/CALL]",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"content": "text", "repeats": True, "join": ""},
    },
}
# Python-style calls: arguments arrive already parsed, so there is no JSON text to keep.
PYTHON_CALLS_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "[ASSISTANT]",
    "fields": {
        "tool_calls": {
            "open": "[TOOL_CALLS]",
            "content": "python-call-list",
            "transform_each": True,
            "transform": {
                "type": "function",
                "function": {"name": "{name}", "arguments": "{arguments}"},
            },
        },
        "content": {"content": "text"},
    },
}


def inline_tokenizer(response_template: dict[str, Any] | None) -> PreTrainedTokenizerFast:
    """A real fast tokenizer, built in memory; parsing only needs its response template."""
    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, response_template=response_template)


def comparable(parsed: ParsedResponse) -> tuple[Any, ...]:
    """Everything but the random call ids."""
    calls = [(c.name, c.arguments, c.raw_arguments, c.error) for c in parsed.tool_calls]
    return parsed.content, parsed.thinking, calls, parsed.truncated_thinking


# --- inline tokenizers -------------------------------------------------------------------------


def test_the_tokenizer_template_decides_the_markers() -> None:
    tokenizer = inline_tokenizer(BRACKET_TEMPLATE)
    text = (
        "[THINK]hmm[/THINK]Checking.\n"
        '[CALL]{"name": "get_weather", "arguments": {"city":  "Oslo"}}[/CALL]'
    )
    parsed = parse_with_tokenizer(text, tokenizer, tools=TOOLS)
    assert (parsed.thinking, parsed.content) == ("hmm", "Checking.")
    (call,) = parsed.tool_calls
    assert (call.name, call.arguments, call.raw_arguments, call.error) == (
        "get_weather",
        {"city": "Oslo"},
        '{"city":  "Oslo"}',  # exact text, recovered from the region's raw chunks
        None,
    )
    # The built-in parser knows only our markers: all of it stays content.
    assert parse_response(text, tools=TOOLS).content == text


def test_thinking_started_opens_the_template_reasoning_region() -> None:
    tokenizer = inline_tokenizer(BRACKET_TEMPLATE)
    cut = parse_with_tokenizer(
        "still going", tokenizer, thinking_started=True, prefix="[ASSISTANT][THINK]"
    )
    assert (cut.thinking, cut.content, cut.truncated_thinking) == ("still going", "", True)
    done = parse_with_tokenizer("done[/THINK] ok", tokenizer, prefix="[USER]x[ASSISTANT][THINK]")
    assert (done.thinking, done.content, done.truncated_thinking) == ("done", "ok", False)


def test_non_json_calls_are_reserialised_and_still_validated() -> None:
    tokenizer = inline_tokenizer(PYTHON_CALLS_TEMPLATE)
    parsed = parse_with_tokenizer(
        "[TOOL_CALLS][get_weather(city='Oslo', days='2'), nope()]", tokenizer, tools=TOOLS
    )
    weather, nope = parsed.tool_calls
    assert (weather.name, weather.arguments) == ("get_weather", {"city": "Oslo", "days": "2"})
    assert json.loads(weather.raw_arguments) == weather.arguments
    assert weather.error is not None and "expected integer" in weather.error  # not cast to 2
    assert nope.error is not None and "no tool 'nope'" in nope.error
    assert weather.id != nope.id


def test_without_a_template_the_builtin_parser_answers() -> None:
    tokenizer = inline_tokenizer(None)
    text = (
        '<think>a</think>b<tool_call>{"name": "get_weather", "arguments": {"city": 1}}</tool_call>'
    )
    assert comparable(parse_with_tokenizer(text, tokenizer, tools=TOOLS)) == comparable(
        parse_response(text, tools=TOOLS)
    )


# --- the embedded family's tokenizer -----------------------------------------------------------


def test_embedded_template_failure_falls_back_to_builtin(
    tiny_tokenizer: PreTrainedTokenizerFast, caplog: pytest.LogCaptureFixture
) -> None:
    # Invalid JSON in a block makes transformers' json region parser raise.
    text = 'Sure.<tool_call>{"name": "get_weather", "arguments": {"city": }</tool_call>'
    with caplog.at_level(logging.DEBUG, logger="mellea_local.parsing.response"):
        parsed = parse_with_tokenizer(text, tiny_tokenizer, tools=TOOLS)
    assert "response_template parser failed" in caplog.text
    (call,) = parsed.tool_calls
    assert call.name == "get_weather"
    assert call.error is not None and "valid JSON" in call.error
    assert parsed.content == "Sure."


def test_embedded_template_does_not_coerce_arguments(
    tiny_tokenizer: PreTrainedTokenizerFast,
) -> None:
    text = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "days": "3"}}</tool_call>'
    )
    (call,) = parse_with_tokenizer(text, tiny_tokenizer, tools=TOOLS).tool_calls
    assert call.arguments == {"city": "Oslo", "days": "3"}
    assert call.error is not None and 'expected integer, got string "3"' in call.error


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "get_weather", "parameters": {"city": "x"}}',
        '{"name": "get_weather", "arguments": "{\\"city\\": \\"x\\"}"}',
        '[{"name": "get_weather", "arguments": {"city": "x"}}]',
        '{"arguments": {"city": "x"}}',
        '{"name": "get_weather"}',
    ],
)
def test_embedded_template_keeps_malformed_calls_like_the_builtin(
    tiny_tokenizer: PreTrainedTokenizerFast, body: str
) -> None:
    text = f"<tool_call>{body}</tool_call>"
    via_template = parse_with_tokenizer(text, tiny_tokenizer, tools=TOOLS)
    assert len(via_template.tool_calls) == 1 and via_template.tool_calls[0].error is not None
    assert comparable(via_template) == comparable(parse_response(text, tools=TOOLS))


def test_embedded_rendered_history_parses_back(tiny_tokenizer: PreTrainedTokenizerFast) -> None:
    raw = '{"city":  "New\\n  York", "days": 2}'
    history = [
        {"role": "user", "content": "Weather in New York?"},
        {
            "role": "assistant",
            "reasoning_content": 'Use {"name": "x"} later.',
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": raw},
                }
            ],
        },
    ]
    prompt = tiny_tokenizer.apply_chat_template(
        history[:1],
        tools=[WEATHER],
        add_generation_prompt=True,
        enable_thinking=True,
        tokenize=False,
    )
    full = tiny_tokenizer.apply_chat_template(history, tools=[WEATHER], tokenize=False)
    assert full.startswith(prompt)
    # What the model generates: the rest of the assistant turn, as decoded from its token ids.
    ids = tiny_tokenizer.encode(full[len(prompt) :], add_special_tokens=False)
    generated = tiny_tokenizer.decode(ids, skip_special_tokens=True)

    parsed = parse_with_tokenizer(
        generated, tiny_tokenizer, tools=TOOLS, thinking_started=True, prefix=prompt
    )
    assert parsed.thinking == 'Use {"name": "x"} later.'
    assert parsed.content == "Checking."
    assert parsed.truncated_thinking is False
    (call,) = parsed.tool_calls
    assert (call.name, call.raw_arguments, call.error) == ("get_weather", raw, None)
    assert call.arguments == {"city": "New\n  York", "days": 2}


def test_embedded_truncated_thinking(tiny_tokenizer: PreTrainedTokenizerFast) -> None:
    prompt = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}],
        add_generation_prompt=True,
        enable_thinking=True,
        tokenize=False,
    )
    text = 'maybe <tool_call>{"name": "get_weather", "arguments": {"city": "x"}}</tool_call>'
    parsed = parse_with_tokenizer(text, tiny_tokenizer, tools=TOOLS, prefix=prompt)
    assert parsed == ParsedResponse(content="", thinking=text, truncated_thinking=True)


_PLAIN = st.text(max_size=20).filter(
    lambda s: not any(m in s for m in ("<think>", "<tool_call>", "<|end_of_text|>", "</think>"))
)
_ARGUMENTS = st.dictionaries(
    st.text(max_size=6),
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=8)
    | st.lists(st.integers(), max_size=2),
    max_size=3,
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    calls=st.lists(st.tuples(st.sampled_from(["get_weather", "search"]), _ARGUMENTS), max_size=3),
    content=_PLAIN,
    thinking=st.none() | _PLAIN,
    thinking_started=st.booleans(),
    indent=st.sampled_from([None, 1, "\t"]),
    gap=st.sampled_from(["", "\n", " \n "]),
)
def test_embedded_template_agrees_with_builtin(
    tiny_tokenizer: PreTrainedTokenizerFast,
    caplog: pytest.LogCaptureFixture,
    calls: list[tuple[str, dict[str, Any]]],
    content: str,
    thinking: str | None,
    thinking_started: bool,
    indent: int | str | None,
    gap: str,
) -> None:
    assume(not (thinking is None and thinking_started))
    assume(calls or not content.strip().startswith("{"))  # a bare JSON call is covered elsewhere
    blocks = gap.join(
        f'<tool_call>{{"name": "{name}", "arguments": {json.dumps(a, indent=indent)}}}</tool_call>'
        for name, a in calls
    )
    head = (
        "" if thinking is None else ("" if thinking_started else "<think>") + thinking + "</think>"
    )
    text = head + content + gap + blocks
    tools = TOOLS | {"search": {"name": "search", "parameters": {"type": "object"}}}

    with caplog.at_level(logging.DEBUG, logger="mellea_local.parsing.response"):
        via_template = parse_with_tokenizer(
            text, tiny_tokenizer, tools=tools, thinking_started=thinking_started
        )
    assert "parser failed" not in caplog.text  # the template itself parsed it
    assert comparable(via_template) == comparable(
        parse_response(text, tools=tools, thinking_started=thinking_started)
    )
