"""Tools for any chat template (rendering.tool_prompt), on the embedded tokenizer: its own
template keeps its tool format; given a ChatML template without a tool slot, a multi-step
ReACT conversation renders exactly as the template renders the equivalent Hermes-format
message dicts written out by hand. SmolLM2's real template: tests/react/test_react_real.py."""

from __future__ import annotations

import copy
import json

import pytest

from mellea_local.core.context import ChatContext
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.core.tool_call import ModelToolCall
from mellea_local.messages import ToolMessage
from mellea_local.options import ModelOption
from mellea_local.react.components import ReactInitiator, ReactThought
from mellea_local.rendering.chat import to_chat_messages
from mellea_local.rendering.request import render_request
from mellea_local.rendering.tool_prompt import (
    HERMES_FORMAT,
    TEMPLATE_FORMAT,
    template_renders_tool_role,
    tool_format,
    tools_system_text,
)
from mellea_local.tools import calculator

CHATML = ("{% for message in messages %}{{'<|start_of_role|>' + message['role'] + "
          "'<|end_of_role|>' + message['content'] + '<|end_of_text|>\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_of_role|>assistant<|end_of_role|>' }}"
          "{% endif %}")
STRICT = ("{% for message in messages %}{% if message['role'] not in ['system', 'user', "
          "'assistant'] %}{{ raise_exception('roles are user/assistant') }}{% endif %}"
          "{{'<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + "
          "'<|end_of_text|>\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_of_role|>assistant<|end_of_role|>' }}{% endif %}")


@pytest.fixture(scope="module")
def chatml(tiny_tokenizer):
    tok = copy.deepcopy(tiny_tokenizer)
    tok.chat_template = CHATML
    return tok


def _step(thinking: str | None, name: str, raw_args: str) -> ModelOutputThunk:
    mot = ModelOutputThunk("")
    mot.thinking = thinking
    mot.tool_calls = [ModelToolCall(name, None, json.loads(raw_args), tool_call_id="c1",
                                    raw_arguments=raw_args)]
    return mot


def _conversation() -> tuple[ChatContext, ReactInitiator]:
    init = ReactInitiator("What is 12 * 7?", [calculator])
    call = _step("I should multiply.", "calculator", '{"expression": "12 * 7"}')
    result = ToolMessage("tool", "84", 84, "calculator", {"expression": "12 * 7"},
                         call.tool_calls[0])
    ctx = ChatContext().add(init).add(call).add(result)
    return ctx, init


def _render(tok, ctx, action, **opts):
    ids, tools, _ = render_request(tok, action, ctx, base_options=None, model_options=opts,
                                   model_id="m", positions=None, tool_calls=True)
    return tok.decode(ids), tools


def _specs(tools) -> list[dict]:
    return [spec for _, spec in tools.values()]


def test_formats_are_told_apart(tiny_tokenizer, chatml):
    assert tool_format(tiny_tokenizer) == TEMPLATE_FORMAT
    assert tool_format(chatml) == HERMES_FORMAT
    assert template_renders_tool_role(chatml)
    strict = copy.deepcopy(tiny_tokenizer)
    strict.chat_template = STRICT
    assert tool_format(strict) == HERMES_FORMAT and not template_renders_tool_role(strict)


def test_a_template_with_a_tool_slot_keeps_its_own_format(tiny_tokenizer):
    _ctx, init = _conversation()
    text, tools = _render(tiny_tokenizer, ChatContext(), init)
    expected = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": init.format_for_llm().template.replace(
            "{{ finalizer_tool_name }}", "final_answer").replace("{{ goal }}",
                                                                 "What is 12 * 7?")}],
        tools=_specs(tools), tokenize=False, add_generation_prompt=True)
    assert text == expected and "<tools>" not in text


def test_a_multi_step_run_renders_as_the_template_renders_the_hermes_dicts(chatml):
    ctx, init = _conversation()
    text, tools = _render(chatml, ctx, ReactThought())
    first_user = to_chat_messages([init])[0].content
    dicts = [
        {"role": "system", "content": tools_system_text(_specs(tools))},
        {"role": "user", "content": first_user},
        {"role": "assistant", "content": "<think>\nI should multiply.\n</think>\n<tool_call>\n"
                                         '{"name": "calculator", "arguments": '
                                         '{"expression": "12 * 7"}}\n</tool_call>'},
        {"role": "tool", "content": "<tool_response>\n84\n</tool_response>"},
        {"role": "user", "content": ReactThought().prompt},
    ]
    assert text == chatml.apply_chat_template(dicts, tokenize=False, add_generation_prompt=True)
    assert '"name": "final_answer"' in text and '"name": "calculator"' in text


def test_thinking_is_dropped_when_the_replay_policy_says_so(chatml):
    ctx, _ = _conversation()
    kept, _ = _render(chatml, ctx, ReactThought())
    dropped, _ = _render(chatml, ctx, ReactThought(), **{ModelOption.REPLAY_THINKING: False})
    assert "I should multiply." in kept and "I should multiply." not in dropped
    assert "<tool_call>" in dropped


def test_a_template_without_a_tool_role_gets_results_as_one_user_turn(tiny_tokenizer):
    strict = copy.deepcopy(tiny_tokenizer)
    strict.chat_template = STRICT
    ctx, _ = _conversation()
    text, _ = _render(strict, ctx, ReactThought())  # the template raises on a tool role
    tail = text.rsplit("</tool_call><|end_of_text|>\n", 1)[1]
    assert tail.startswith("<|start_of_role|>user<|end_of_role|><tool_response>\n84\n"
                           "</tool_response>\n\nThink about what to do next")


def test_an_existing_system_turn_gets_the_tools_block_appended(chatml):
    _ctx, init = _conversation()
    text, _ = _render(chatml, ChatContext(), init,
                      **{ModelOption.SYSTEM_PROMPT: "You are terse."})
    assert text.startswith("<|start_of_role|>system<|end_of_role|>You are terse.\n\n# Tools")
    assert text.count("<|start_of_role|>system") == 1


def test_the_tool_probes_render_in_the_bounded_sandbox(tiny_tokenizer):
    # A template we did not write must not hang the probe that picks the tool format: it runs
    # in the same time-bounded sandbox as every render, so a runaway loop ends in seconds.
    import time

    from mellea_local.rendering.tool_prompt import template_renders_tools

    hostile = copy.deepcopy(tiny_tokenizer)
    hostile.chat_template = ("{% for a in range(100000) %}{% for b in range(100000) %}"
                             "{% endfor %}{% endfor %}{{ messages[0]['content'] }}")
    started = time.monotonic()
    assert template_renders_tools(hostile) is False
    assert time.monotonic() - started < 20
