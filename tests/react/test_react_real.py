"""ReACT on the real model, SmolLM2-135M-Instruct, whose ChatML template has no tool slot: the
Hermes tool format, the tool-call grammar (exactness and zero invalid calls), thinking traces,
and what the loop does with the real model's mistakes."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import torch

from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.errors import ReactLoopError
from mellea_local.messages import Message, ToolMessage
from mellea_local.options import ModelOption
from mellea_local.parsing.tool_grammar import tool_call_grammar
from mellea_local.react import react
from mellea_local.react.components import ReactThought
from mellea_local.rendering.chat import to_chat_messages
from mellea_local.rendering.tool_prompt import HERMES_FORMAT, tool_format, tools_system_text
from mellea_local.tools import MelleaTool, calculator

sys.path.insert(0, str(Path(__file__).parents[1] / "parsing"))
from test_react_hf import Forcer
from test_tool_grammar import greedy_prefix_agrees, inside_grammar_prefix

pytestmark = pytest.mark.real_model

SHOT = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 + 2"}}\n</tool_call>'


@pytest.fixture(scope="module")
def smollm():
    torch.set_num_threads(1)
    return LocalHFBackend("smollm2-135m", device="cpu")


def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a length between units.

    Args:
        value: The number to convert.
        from_unit: Its unit: km, m, mi or ft.
        to_unit: The unit wanted: km, m, mi or ft.
    """
    factor = {"km": 1000.0, "m": 1.0, "mi": 1609.344, "ft": 0.3048}
    return f"{value * factor[from_unit] / factor[to_unit]:.2f} {to_unit}"


def test_smollm2_gets_the_hermes_format(smollm):
    assert tool_format(smollm.tokenizer) == HERMES_FORMAT


def test_constrained_greedy_equals_unconstrained_while_the_model_stays_in_the_grammar(smollm):
    """Whole-step equality where SmolLM2's own greedy call is valid (a one-shot history), and
    agreement up to the first token the grammar forbids where it is not."""
    shot = [Message("user", "Call the calculator tool for 2 + 2."), Message("assistant", SHOT)]
    cases = [(shot, "Now call the calculator tool for 3 * 5.", True),
             ([], "Call the calculator tool for 3 * 5.", False)]
    for history, ask, whole in cases:
        ctx = ChatContext()
        for m in history:
            ctx = ctx.add(m)
        ids, tools, _ = smollm.render(Message("user", ask), ctx, tool_calls=True,
                                      model_options={ModelOption.TOOLS: [calculator]})
        grammar = tool_call_grammar([s for _, s in tools.values()], tokenizer=smollm.tokenizer)
        free, held = greedy_prefix_agrees(smollm, ids, grammar, 40)
        n = inside_grammar_prefix(smollm.tokenizer, grammar, free)
        assert held[:n] == free[:n]
        assert (n == len(free) and held == free) is whole, smollm.tokenizer.decode(free)


def test_a_constrained_run_makes_no_invalid_call_and_the_loop_reads_each_result(smollm):
    async def run():
        try:
            out, ctx = await react(
                "How many miles is 10 km?", ChatContext(), smollm,
                tools=[calculator, MelleaTool.from_callable(convert_units)], loop_budget=3,
                model_options={ModelOption.MAX_NEW_TOKENS: 96})
        except ReactLoopError as exc:
            return None, exc
        return (out, ctx), None

    done, error = asyncio.run(run())
    if error is not None:
        # Whatever the real model did, each step was a valid call (the grammar), so the
        # error is the plain budget one that lists them, not "no valid call".
        assert type(error) is ReactLoopError and "step 3:" in str(error)
        assert "no tool named" not in str(error) and "Invalid arguments" not in str(error)
    else:
        out, ctx = done
        calls = [c for e in ctx.as_list() for c in (getattr(e, "tool_calls", None) or [])
                 if not isinstance(c, dict)]
        assert calls and all(c.error is None for c in calls)
        assert isinstance(out.value, str)


def test_thinking_lands_in_thinking_is_replayed_and_the_prompt_is_the_template_s(smollm):
    """Forced steps through the real generate path: the <think> block goes to
    ``thunk.thinking``, not the answer; the next prompt is exactly the tokenizer's rendering of
    the equivalent Hermes message dicts, thinking replayed, and extends the previous prompt."""
    turns = [
        '<think>\nI should convert km to miles.\n</think>\n<tool_call>\n{"name": '
        '"convert_units", "arguments": {"value": 10, "from_unit": "km", "to_unit": "mi"}}\n'
        '</tool_call>',
        '<think>\nThe tool said 6.21 mi.\n</think>\n<tool_call>\n{"name": "final_answer", '
        '"arguments": {"answer": "6.21 miles"}}\n</tool_call>',
    ]
    forcer = Forcer(smollm, turns)
    tool = MelleaTool.from_callable(convert_units)
    opts = {"prefix_allowed_tokens_fn": forcer, ModelOption.MAX_NEW_TOKENS: 80}
    out, ctx = asyncio.run(react("How many miles is 10 km?", ChatContext(), smollm,
                                 tools=[tool], model_options=opts))
    assert out.value == "6.21 miles"
    steps = [e for e in ctx.as_list() if type(e).__name__ == "ComputedModelOutputThunk"]
    assert steps[0].thinking == "I should convert km to miles."
    assert "think" not in (steps[0].value or "") and "think" not in out.value
    assert next(e.content for e in ctx.as_list() if isinstance(e, ToolMessage)) == "6.21 mi"

    tok = smollm.tokenizer
    init = ctx.as_list()[0]
    specs = [tool.as_json_tool, *[t.as_json_tool for n, t in init.tool_map.items()
                                   if n == "final_answer"]]
    dicts = [
        {"role": "system", "content": tools_system_text(specs)},
        {"role": "user", "content": to_chat_messages([init])[0].content},
        {"role": "assistant", "content": turns[0]},
        {"role": "tool", "content": "<tool_response>\n6.21 mi\n</tool_response>"},
        {"role": "user", "content": ReactThought().prompt},
    ]
    expected = tok.apply_chat_template(dicts, tokenize=False, add_generation_prompt=True)
    assert tok.decode(forcer.prompts[1]) == expected
    previous = forcer.prompts[0] + forcer.scripts[0]
    assert forcer.prompts[1][: len(previous) - 1] == previous[:-1]  # the history, token for token
