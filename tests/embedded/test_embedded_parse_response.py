"""`tokenizer.parse_response` on the embedded format (the tokenizer's response template)."""

from __future__ import annotations

import pytest

from mellea_local.embedded import response_template

USER = [{"role": "user", "content": "What is 2 + 3?"}]
CALC = {
    "name": "calculator",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
}
ADD = {
    "name": "add",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    },
}


def prompt(tok, *, thinking: bool = False, messages=USER, tools=None) -> str:
    return tok.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True, enable_thinking=thinking
    )


def test_plain_content(tiny_tokenizer):
    parsed = tiny_tokenizer.parse_response("Five.<|end_of_text|>", prefix=prompt(tiny_tokenizer))
    assert parsed == {"role": "assistant", "content": "Five."}


def test_thinking_written_by_the_model(tiny_tokenizer):
    text = "<think>2 plus 3 is 5.</think>It is 5."
    parsed = tiny_tokenizer.parse_response(text, prefix=prompt(tiny_tokenizer))
    assert parsed == {
        "role": "assistant",
        "reasoning_content": "2 plus 3 is 5.",
        "content": "It is 5.",
    }


def test_thinking_opened_by_the_prompt(tiny_tokenizer):
    """With thinking on, `<think>` sits in the prompt; the prefix tells the parser."""
    pre = prompt(tiny_tokenizer, thinking=True)
    assert pre.endswith("<think>")
    parsed = tiny_tokenizer.parse_response("2 plus 3 is 5.</think>It is 5.", prefix=pre)
    assert parsed["reasoning_content"] == "2 plus 3 is 5."
    assert parsed["content"] == "It is 5."


def test_unclosed_thinking_is_all_thinking(tiny_tokenizer):
    pre = prompt(tiny_tokenizer, thinking=True)
    parsed = tiny_tokenizer.parse_response("2 plus 3 is", prefix=pre)
    assert parsed == {"role": "assistant", "reasoning_content": "2 plus 3 is"}


def test_tool_calls(tiny_tokenizer):
    text = (
        "<think>Use the tools.</think>"
        '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>'
        '<tool_call>{"name": "lookup", "arguments": {"key": "color"}}</tool_call>'
        "<|end_of_text|>"
    )
    parsed = tiny_tokenizer.parse_response(text, prefix=prompt(tiny_tokenizer))
    assert parsed == {
        "role": "assistant",
        "reasoning_content": "Use the tools.",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "calculator", "arguments": {"expression": "2 + 3"}},
            },
            {"type": "function", "function": {"name": "lookup", "arguments": {"key": "color"}}},
        ],
    }


def test_content_around_tool_calls_is_kept(tiny_tokenizer):
    text = 'Let me add.<tool_call>{"name": "add", "arguments": {"a": "2", "b": 3}}</tool_call>\n'
    parsed = tiny_tokenizer.parse_response(text, prefix=prompt(tiny_tokenizer), tools=[ADD])
    assert parsed["content"] == "Let me add."  # the newline after the call adds nothing
    # With `tools=`, arguments are cast with the tool's schema.
    assert parsed["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 2, "b": 3}}


def test_only_the_last_assistant_turn_is_parsed(tiny_tokenizer):
    history = [
        *USER,
        {"role": "assistant", "content": "Earlier answer.", "reasoning_content": "old"},
        {"role": "user", "content": "And 3 + 4?"},
    ]
    parsed = tiny_tokenizer.parse_response("7.", prefix=prompt(tiny_tokenizer, messages=history))
    assert parsed == {"role": "assistant", "content": "7."}


@pytest.mark.parametrize("thinking", [False, True])
def test_parse_inverts_rendering(tiny_tokenizer, thinking):
    """Render an assistant turn, cut it after the generation prompt, parse it back."""
    message = {
        "role": "assistant",
        "content": "I will compute it.",
        "reasoning_content": "Call the calculator.",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "calculator", "arguments": {"expression": "(2 + 3) * 4"}},
            }
        ],
    }
    pre = prompt(tiny_tokenizer, thinking=thinking, tools=[CALC])
    full = tiny_tokenizer.apply_chat_template([*USER, message], tools=[CALC], tokenize=False)
    written = full[len(pre) :]
    assert tiny_tokenizer.parse_response(written, prefix=pre) == message


def test_response_template_survives_save_and_load(tiny_model_dir):
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert loaded.response_template == response_template()
    parsed = loaded.parse_response("<think>a</think>b", prefix="")
    assert parsed == {"role": "assistant", "reasoning_content": "a", "content": "b"}


def test_token_ids_parse_like_text(tiny_tokenizer):
    text = '<think>x</think>y<tool_call>{"name": "f", "arguments": {}}</tool_call><|end_of_text|>'
    ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    pre = prompt(tiny_tokenizer)
    assert tiny_tokenizer.parse_response(ids, prefix=pre) == tiny_tokenizer.parse_response(
        text, prefix=pre
    )
