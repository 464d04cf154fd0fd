"""The embedded chat template: exact rendering, thinking switches, and prefix stability.

Prefix stability is checked in token space because that is what KV-cache reuse needs: the ids
of a rendered history must be a prefix of the ids after the next turn, and the ids of a
prompt followed by the ids of what the model wrote must equal the re-rendered history.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jinja2.exceptions import TemplateError

CALC = {
    "name": "calculator",
    "description": "Evaluate an integer arithmetic expression.",
    "parameters": {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
}
LOOKUP = {
    "name": "lookup",
    "description": "Look up a key.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
}
TOOLS = [{"type": "function", "function": CALC}, LOOKUP]  # wrapped and bare forms

HISTORY = [
    {"role": "system", "content": "You are a ReACT agent."},
    {"role": "user", "content": "What is 12 * 3, and what is stored under color?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "I need the calculator and the lookup.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "calculator", "arguments": {"expression": "12 * 3"}},
            },
            {
                "id": "call_2",
                "type": "function",
                # A JSON string, spaced unlike json.dumps: it must be written verbatim.
                "function": {"name": "lookup", "arguments": '{"key":"color" }'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "name": "calculator", "content": "36"},
    {"role": "tool", "tool_call_id": "call_2", "name": "lookup", "content": {"value": "blue"}},
    {"role": "assistant", "content": "36, and the color is blue.", "thinking": "Both known."},
]

EXPECTED = (
    "<|start_of_role|>system<|end_of_role|>You are a ReACT agent.<|end_of_text|>\n"
    "<|start_of_role|>available_tools<|end_of_role|>"
    + json.dumps(CALC)
    + "\n"
    + json.dumps(LOOKUP)
    + "<|end_of_text|>\n"
    "<|start_of_role|>user<|end_of_role|>What is 12 * 3, and what is stored under color?"
    "<|end_of_text|>\n"
    "<|start_of_role|>assistant<|end_of_role|><think>I need the calculator and the lookup.</think>"
    '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 3"}}</tool_call>'
    '<tool_call>{"name": "lookup", "arguments": {"key":"color" }}</tool_call><|end_of_text|>\n'
    "<|start_of_role|>tool_response<|end_of_role|>36<|end_of_text|>\n"
    '<|start_of_role|>tool_response<|end_of_role|>{"value": "blue"}<|end_of_text|>\n'
    "<|start_of_role|>assistant<|end_of_role|><think>Both known.</think>"
    "36, and the color is blue.<|end_of_text|>\n"
)


def render(tok, messages, **kwargs) -> str:
    return tok.apply_chat_template(messages, tokenize=False, **kwargs)


def ids(tok, messages, **kwargs) -> list[int]:
    return tok.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)["input_ids"]


def test_full_history_renders_exactly(tiny_tokenizer):
    assert render(tiny_tokenizer, HISTORY, tools=TOOLS) == EXPECTED


def test_generation_prompt_and_thinking_switches(tiny_tokenizer):
    msgs = [{"role": "user", "content": "Hi"}]
    base = "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n"
    prompt = base + "<|start_of_role|>assistant<|end_of_role|>"
    assert render(tiny_tokenizer, msgs) == base
    assert render(tiny_tokenizer, msgs, add_generation_prompt=True) == prompt
    for switch in ("enable_thinking", "thinking", "think"):
        on = render(tiny_tokenizer, msgs, add_generation_prompt=True, **{switch: True})
        off = render(tiny_tokenizer, msgs, add_generation_prompt=True, **{switch: False})
        assert on == prompt + "<think>", switch
        assert off == prompt, switch
    # The switch only shapes the generation prompt, never the rendered history.
    assert render(tiny_tokenizer, msgs, enable_thinking=True) == base


def test_template_declares_every_thinking_switch(tiny_tokenizer):
    from mellea_local.options import THINKING_TEMPLATE_VARS, template_variables

    declared = template_variables(tiny_tokenizer.chat_template)
    assert {"enable_thinking", "thinking", "think", "tools"} <= declared
    assert set(THINKING_TEMPLATE_VARS) & declared


def test_wrapped_and_bare_tool_specs_render_the_same(tiny_tokenizer):
    msgs = [{"role": "user", "content": "x"}]
    wrapped = [{"type": "function", "function": CALC}, {"type": "function", "function": LOOKUP}]
    assert render(tiny_tokenizer, msgs, tools=wrapped) == render(
        tiny_tokenizer, msgs, tools=[CALC, LOOKUP]
    )


def test_tools_turn_comes_first_without_a_system_message(tiny_tokenizer):
    text = render(tiny_tokenizer, [{"role": "user", "content": "x"}], tools=[CALC])
    assert text.startswith("<|start_of_role|>available_tools<|end_of_role|>" + json.dumps(CALC))


def test_bare_tool_call_and_empty_reasoning(tiny_tokenizer):
    msgs = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "reasoning_content": "",
            "tool_calls": [{"name": "final_answer", "arguments": {"answer": "é 1"}}],
        },
    ]
    assert render(tiny_tokenizer, msgs).endswith(
        "<|start_of_role|>assistant<|end_of_role|><think></think>"
        '<tool_call>{"name": "final_answer", "arguments": {"answer": "é 1"}}</tool_call>'
        "<|end_of_text|>\n"
    )


def test_text_parts_are_joined_and_other_parts_refused(tiny_tokenizer):
    parts = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]
    assert render(tiny_tokenizer, [{"role": "user", "content": parts}]) == (
        "<|start_of_role|>user<|end_of_role|>Hello there<|end_of_text|>\n"
    )
    image = [{"type": "text", "text": "Look:"}, {"type": "image", "url": "cat.png"}]
    with pytest.raises(TemplateError, match="non-text part"):
        render(tiny_tokenizer, [{"role": "user", "content": image}])


def _assert_token_prefix(tok, before: list[dict], after: list[dict], **kwargs) -> None:
    short = ids(tok, before, add_generation_prompt=after[-1]["role"] == "assistant", **kwargs)
    long = ids(tok, after, **kwargs)
    assert long[: len(short)] == short


def test_each_turn_keeps_the_previous_tokens_as_prefix(tiny_tokenizer):
    for n in range(1, len(HISTORY)):
        _assert_token_prefix(tiny_tokenizer, HISTORY[:n], HISTORY[: n + 1], tools=TOOLS)
        _assert_token_prefix(
            tiny_tokenizer, HISTORY[:n], HISTORY[: n + 1], tools=TOOLS, enable_thinking=True
        )


@pytest.mark.parametrize("thinking", [False, True])
def test_prompt_plus_generated_text_equals_rerendered_history(tiny_tokenizer, thinking):
    """What KV reuse across ReACT turns relies on, in strings and in token ids."""
    tok = tiny_tokenizer
    for n, message in enumerate(HISTORY):
        if message["role"] != "assistant" or not (
            message.get("reasoning_content") or message.get("thinking")
        ):
            continue
        history = HISTORY[:n]
        prompt = render(tok, history, tools=TOOLS, add_generation_prompt=True, think=thinking)
        full = render(tok, HISTORY[: n + 1], tools=TOOLS)
        assert full.startswith(prompt)
        generated = full[len(prompt) :]  # exactly what the model would have written
        assert generated.endswith("<|end_of_text|>\n")
        prompt_ids = ids(tok, history, tools=TOOLS, add_generation_prompt=True, think=thinking)
        generated_ids = tok(generated, add_special_tokens=False)["input_ids"]
        assert prompt_ids + generated_ids == ids(tok, HISTORY[: n + 1], tools=TOOLS)


_content = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    user=_content,
    reasoning=_content,
    answer=_content,
    tool_output=_content,
    argument=_content,
    thinking=st.booleans(),
)
def test_prefix_stability_holds_for_any_text(
    tiny_tokenizer, user, reasoning, answer, tool_output, argument, thinking
):
    tok = tiny_tokenizer
    call = {"type": "function", "function": {"name": "lookup", "arguments": {"key": argument}}}
    turns = [
        {"role": "user", "content": user},
        {"role": "assistant", "content": "", "reasoning_content": reasoning, "tool_calls": [call]},
        {"role": "tool", "content": tool_output},
        {"role": "assistant", "content": answer, "reasoning_content": reasoning},
    ]
    for n in range(1, len(turns)):
        _assert_token_prefix(tok, turns[:n], turns[: n + 1], tools=[LOOKUP], think=thinking)
    prompt = render(tok, turns[:3], tools=[LOOKUP], add_generation_prompt=True, think=thinking)
    written = ("" if thinking else "<think>") + f"{reasoning}</think>{answer}<|end_of_text|>\n"
    assert prompt + written == render(tok, turns, tools=[LOOKUP])
