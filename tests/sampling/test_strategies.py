"""Sampling strategies and instruct, driven by a scripted backend (loop logic only)."""

from __future__ import annotations

import json

import pydantic
import pytest
from doubles import ScriptedBackend

from mellea_local.core.context import ChatContext, SimpleContext
from mellea_local.messages import Message
from mellea_local.options import ModelOption
from mellea_local.rendering import component_text, to_chat_messages
from mellea_local.requirements import Requirement, ValidationResult, check, simple_validate
from mellea_local.sampling import (
    DEFAULT_STRATEGY,
    Instruction,
    MultiTurnStrategy,
    RejectionSamplingStrategy,
    RepairTemplateStrategy,
    SamplingResult,
    ainstruct,
    combine_requirements,
    instruct,
)


def score(p: float) -> str:
    return json.dumps({"requirement_check": {"score": p}})


def contains(word: str) -> Requirement:
    return Requirement(f"Mention {word}.",
                       simple_validate(lambda text: word in text, reason=f"{word} is missing"))


def judged_contexts() -> list:
    """A validation_fn that records the context it was given and passes."""
    seen: list = []

    def fn(ctx):
        seen.append(ctx)
        return True

    return seen, Requirement("Recorded.", fn)


async def test_rejection_resamples_until_a_sample_passes():
    backend = ScriptedBackend.scripted(["no fruit here", "an apple a day"])
    action = Instruction("Write about fruit.")
    base = ChatContext().add(Message("system", "Be brief."))
    result = await RejectionSamplingStrategy(loop_budget=3).sample(
        action, base, backend, [contains("apple")])

    assert result.success and result.result_index == 1 and len(result.attempts) == 2
    assert result.value == "an apple a day" and result.result is result.sample
    first, second = backend.generate_calls
    assert first.action is action and second.action is action
    assert first.ctx is base and second.ctx is base  # a fresh draw from the same context
    assert [bool(v) for v in result.attempts[0].validations] == [False]
    assert result.attempts[0].validations[0].reason == "apple is missing"
    assert result.result_context.as_list() == [*base.as_list(), action, result.result]


async def test_validation_runs_over_the_real_conversation():
    seen, recorder = judged_contexts()
    backend = ScriptedBackend.scripted(["answer"])
    base = ChatContext().add(Message("system", "s"))
    action = Instruction("Do it.")
    result = await RejectionSamplingStrategy().sample(action, base, backend, [recorder])
    [ctx] = seen
    assert ctx is result.result_context
    assert ctx.as_list() == [base.as_list()[0], action, result.result]


async def test_requirement_order_is_kept_and_adapter_checks_go_as_one_batch():
    descriptions = [f"Requirement number {i}." for i in range(12)]
    scores = [score(0.9 if i % 3 else 0.1) for i in range(12)]
    backend = ScriptedBackend.scripted(["text"], scores=scores, intrinsics={"requirement-check"})
    _, recorder = judged_contexts()
    reqs = [*descriptions[:6], recorder, *descriptions[6:]]
    result = await RejectionSamplingStrategy().sample(
        Instruction("Write."), ChatContext(), backend, reqs)

    [batch] = backend.score_calls
    assert batch.descriptions == descriptions  # one call, in order, code checks not included
    assert batch.ctx is result.result_context
    verdicts = result.result_validations
    assert [v.score for v in verdicts[:6] + verdicts[7:]] == [
        0.1 if i % 3 == 0 else 0.9 for i in range(12)]
    assert verdicts[6].score is None and bool(verdicts[6])
    assert not result.success


async def test_all_failing_returns_the_best_attempt():
    backend = ScriptedBackend.scripted(["a", "a b", "b"])
    reqs = [contains("a"), contains("b")]
    result = await RejectionSamplingStrategy(loop_budget=3).sample(
        Instruction("x"), ChatContext(), backend, reqs)
    assert result.success and result.result_index == 1
    backend = ScriptedBackend.scripted(["a", "b", "nothing"])
    result = await RejectionSamplingStrategy(loop_budget=3).sample(
        Instruction("x"), ChatContext(), backend, reqs)
    assert not result.success and result.result_index == 0  # ties: the earliest
    assert [a.passed_count for a in result.attempts] == [1, 1, 0]


async def test_repair_template_amends_the_instruction_with_what_failed():
    backend = ScriptedBackend.scripted(["first try", "apple and pear"])
    reqs = [contains("apple"), Requirement("Be short.", lambda ctx: True),
            check("Mention pear.", simple_validate(lambda t: "pear" in t))]
    original = Instruction("Write about fruit.", reqs)
    result = await RepairTemplateStrategy(loop_budget=2).sample(
        original, ChatContext(), backend, reqs)

    assert result.success
    repaired = backend.generate_calls[1].action
    assert isinstance(repaired, Instruction) and repaired is not original
    assert component_text(repaired) == (
        "Write about fruit.\n\nRequirements:\n* Mention apple.\n* Be short.\n\n"
        "The following requirements failed before:\n* apple is missing"
    )  # the check_only requirement is neither shown nor fed back
    assert backend.generate_calls[1].ctx is backend.generate_calls[0].ctx


async def test_repair_template_needs_an_instruction():
    with pytest.raises(TypeError, match="Instruction"):
        await RepairTemplateStrategy().sample(
            Message("user", "hi"), ChatContext(), ScriptedBackend.scripted([]), ["x"])


async def test_multi_turn_replies_to_the_failed_answer_in_the_same_conversation():
    backend = ScriptedBackend.scripted(["no", "still no", "apple!"])
    action = Instruction("Name a fruit.")
    result = await MultiTurnStrategy(loop_budget=3).sample(
        action, ChatContext(), backend, [contains("apple")])

    assert result.success and result.result_index == 2
    second = backend.generate_calls[1]
    assert second.ctx is result.attempts[0].context
    assert isinstance(second.action, Message) and second.action.role == "user"
    assert second.action.content == (
        "The following requirements have not been met:\n* apple is missing\n"
        "Please try again to fulfill the requirements.")
    roles = [m.role for m in to_chat_messages(result.result_context.as_list())]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]


async def test_multi_turn_returns_the_latest_best_failure_and_needs_a_chat():
    backend = ScriptedBackend.scripted(["a", "b"])
    result = await MultiTurnStrategy(loop_budget=2).sample(
        Instruction("x"), ChatContext(), backend, [contains("z")])
    assert not result.success and result.result_index == 1
    with pytest.raises(TypeError, match="ChatContext"):
        await MultiTurnStrategy().sample(Instruction("x"), SimpleContext(),
                                         ScriptedBackend.scripted([]), [])


@pytest.mark.parametrize("bad", [0, -1, True, 2.0])
def test_loop_budget_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="loop_budget"):
        RejectionSamplingStrategy(loop_budget=bad)


async def test_later_attempts_shift_the_seed_and_options_are_not_changed():
    backend = ScriptedBackend.scripted(["a", "b", "c"])
    opts = {ModelOption.SEED: 5, ModelOption.MAX_NEW_TOKENS: 9}
    await RejectionSamplingStrategy(loop_budget=3).sample(
        Instruction("x"), ChatContext(), backend, [contains("z")], model_options=opts)
    seeds = [c.model_options[ModelOption.SEED] for c in backend.generate_calls]
    assert seeds == [5, 6, 7]
    assert all(c.model_options[ModelOption.MAX_NEW_TOKENS] == 9 for c in backend.generate_calls)
    assert opts == {ModelOption.SEED: 5, ModelOption.MAX_NEW_TOKENS: 9}
    unseeded = {"temperature": 0.7}
    backend = ScriptedBackend.scripted(["a", "b"])
    await RejectionSamplingStrategy(loop_budget=2).sample(
        Instruction("x"), ChatContext(), backend, [contains("z")], model_options=unseeded)
    assert [c.model_options for c in backend.generate_calls] == [unseeded, unseeded]


class Reply(pydantic.BaseModel):
    text: str


async def test_format_reaches_every_attempt():
    backend = ScriptedBackend.scripted(['{"text": "a"}', '{"text": "b"}'])
    await RejectionSamplingStrategy(loop_budget=2).sample(
        Instruction("x"), ChatContext(), backend, [contains("zz")], format=Reply)
    assert [c.format for c in backend.generate_calls] == [Reply, Reply]


def test_combine_requirements_keeps_order_and_drops_repeats():
    a, b = Requirement("A."), Requirement("B.")
    combined = combine_requirements([a, "C.", b], ["C.", a, "D."], None)
    assert [r.description for r in combined] == ["A.", "C.", "B.", "D."]
    assert combined[0] is a and combined[2] is b


async def test_instruct_lists_requirements_and_uses_strategy_ones_first():
    strategy = RejectionSamplingStrategy(loop_budget=2, requirements=["Be polite."])
    _, recorder = judged_contexts()
    # The answer, then the model's yes/no verdicts on the two plain requirements.
    backend = ScriptedBackend.scripted(["Hello, friend.", "yes", "yes"])
    result = await ainstruct(
        "Greet the user.", ChatContext(), backend, strategy=strategy,
        requirements=["Say hello.", recorder, check("Secret check.", lambda ctx: True)],
    )
    action = backend.generate_calls[0].action
    assert isinstance(action, Instruction)
    assert component_text(action) == (
        "Greet the user.\n\nRequirements:\n* Be polite.\n* Say hello.\n* Recorded.")
    assert isinstance(result, SamplingResult) and result.success
    assert len(result.result_validations) == 4
    judged = [c.action.content for c in backend.generate_calls[1:]]
    assert [q.rsplit("Requirement: ", 1)[1] for q in judged] == ["Be polite.", "Say hello."]


async def test_instruct_with_no_strategy_generates_once_and_still_validates():
    backend = ScriptedBackend.scripted(["plain"])
    result = await ainstruct("Say it.", ChatContext(), backend, strategy=None,
                             requirements=[contains("plain")])
    assert result.success and len(result.attempts) == 1
    assert DEFAULT_STRATEGY.loop_budget == 2
    with pytest.raises(TypeError, match="strategy"):
        await ainstruct("x", ChatContext(), backend, strategy="fast")  # type: ignore[arg-type]


def test_sync_instruct_outside_and_inside_a_loop():
    backend = ScriptedBackend.scripted(["ok"])
    result = instruct("Say ok.", ChatContext(), backend, requirements=[contains("ok")])
    assert result.success and result.value == "ok"


async def test_sync_instruct_refuses_a_running_loop():
    with pytest.raises(RuntimeError, match="ainstruct"):
        instruct("x", ChatContext(), ScriptedBackend.scripted([]))


def test_sampling_result_checks_its_index():
    with pytest.raises(ValueError):
        SamplingResult(True, 0, [])


def test_a_validation_result_with_an_error_never_passes():
    from mellea_local.core.thunk import ComputedModelOutputThunk, ModelOutputThunk
    from mellea_local.sampling import SamplingAttempt

    attempt = SamplingAttempt(0, Instruction("x"), ComputedModelOutputThunk(ModelOutputThunk("v")),
                              ChatContext(), [ValidationResult(True, error=ValueError("bad"))])
    assert not attempt.passed and attempt.passed_count == 0
