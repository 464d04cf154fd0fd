"""What a real small model gets wrong in a ReACT loop, scripted (loop logic only): each mistake
becomes an observation the model reads, or a typed error that lists what each step did and
gives advice that fits (more budget only when the model was making valid calls)."""

from __future__ import annotations

import pytest
from scripted import call, final, scripted, turn

from mellea_local.core.context import ChatContext
from mellea_local.errors import ReactLoopError, ReactNoValidCallError
from mellea_local.messages import ToolMessage
from mellea_local.options import ModelOption
from mellea_local.react import react
from mellea_local.react.components import NO_CALL_PROMPT, REPEAT_PROMPT
from mellea_local.tools import MelleaTool, calculator


def observations(ctx) -> list[str]:
    return [e.content for e in ctx.as_list() if isinstance(e, ToolMessage)]


async def test_a_repeated_call_is_not_run_again_and_the_model_reads_the_earlier_result():
    runs = []

    def lookup_price(item: str) -> str:
        """Price of an item.

        Args:
            item: The item.
        """
        runs.append(item)
        return "3 EUR"

    backend = scripted(turn(call("lookup_price", item="tea")),
                       turn(call("lookup_price", item="tea")), final("3 EUR"))
    out, ctx = await react("goal", ChatContext(), backend,
                           tools=[MelleaTool.from_callable(lookup_price)])
    obs = observations(ctx)
    assert runs == ["tea"] and out.value == "3 EUR"
    assert obs[0] == "3 EUR"
    assert "already called lookup_price with these arguments at step 1" in obs[1]
    assert "3 EUR" in obs[1] and "final_answer" in obs[1]
    # The step after a repeat asks for the answer and may only call final_answer.
    third = backend.generate_calls[2]
    assert third.action.prompt == REPEAT_PROMPT
    assert third.model_options[ModelOption.TOOL_CHOICE] == "final_answer"
    assert ModelOption.TOOL_CHOICE not in (backend.generate_calls[1].model_options or {})


async def test_a_step_without_a_call_gets_a_nudge_naming_the_missing_call():
    backend = scripted(turn(text="The answer is 4."), final("4"))
    out, _ = await react("goal", ChatContext(), backend, tools=[calculator])
    second_action = backend.generate_calls[1].action
    assert second_action.prompt == NO_CALL_PROMPT and out.value == "4"


async def test_no_valid_call_in_the_budget_is_a_typed_error_that_does_not_advise_more_budget():
    backend = scripted(
        turn(text="I think the answer is 4"),
        turn(call("calculatorr", expression="2+2")),
        turn(call("calculator", error="The <tool_call> block does not hold one valid JSON "
                                      "object.")),
        turn(call("calculator", expression=4)),
    )
    with pytest.raises(ReactNoValidCallError) as info:
        await react("goal", ChatContext(), backend, tools=[calculator], loop_budget=4)
    text = str(info.value)
    assert isinstance(info.value, ReactLoopError) and isinstance(info.value, RuntimeError)
    assert "never wrote a valid tool call" in text and "Raise loop_budget" not in text
    assert "CONSTRAIN_TOOL_CALLS" in text and "trained for tool calls" in text
    assert "step 1: no tool call" in text
    assert "step 2: calculatorr: Error: there is no tool named 'calculatorr'" in text
    assert "step 3: calculator: Error: The <tool_call> block" in text
    assert "step 4: calculator:" in text and "valid string" in text


async def test_valid_calls_without_a_final_answer_advise_more_budget_and_list_the_steps():
    backend = scripted(turn(call("calculator", expression="1 + 1")),
                       turn(call("calculator", expression="2 + 2")))
    with pytest.raises(ReactLoopError) as info:
        await react("goal", ChatContext(), backend, tools=[calculator], loop_budget=2)
    assert not isinstance(info.value, ReactNoValidCallError)
    text = str(info.value)
    assert "Raise loop_budget" in text and "step 1: calculator: ok" in text
    assert "step 2: calculator: ok" in text


async def test_a_tool_that_raises_is_a_valid_call_whose_error_the_model_reads():
    def broken(x: int) -> int:
        """Always fails.

        Args:
            x: A number.
        """
        raise KeyError(x)

    backend = scripted(turn(call("broken", x=1)))
    with pytest.raises(ReactLoopError) as info:
        await react("goal", ChatContext(), backend, tools=[MelleaTool.from_callable(broken)],
                    loop_budget=1)
    assert not isinstance(info.value, ReactNoValidCallError)
    assert "tool 'broken' failed: KeyError: 1" in str(info.value)
