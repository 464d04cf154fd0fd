"""avalidate / validate routing, batching and context rules, on a scripted backend."""

from __future__ import annotations

import json

import pytest
from doubles import ScriptedBackend

from mellea_local.core.context import ChatContext, SimpleContext
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import AdapterSchemaMismatchError, MelleaLocalError
from mellea_local.messages import Message
from mellea_local.requirements import (
    ALoraRequirement,
    LLMaJRequirement,
    Requirement,
    ValidationResult,
    avalidate,
    simple_validate,
    validate,
)


def rc(p: float) -> str:
    return json.dumps({"requirement_check": {"score": p}})


def conversation(answer: str = "Paris.") -> tuple[ChatContext, ModelOutputThunk]:
    ctx = ChatContext().add(Message("system", "Be brief.")).add(Message("user", "Capital?"))
    return ctx, ModelOutputThunk(answer)


async def test_validation_functions_run_directly_without_the_backend():
    backend = ScriptedBackend.scripted()
    ctx, out = conversation("Paris.")
    seen = []

    def ends_with_period(c):
        seen.append(c)
        return ValidationResult(c.last_output().value.endswith("."), reason="period")

    results = await avalidate(
        [
            Requirement("ends with a period", ends_with_period),
            Requirement(None, simple_validate(lambda s: len(s) < 3)),
            Requirement(None, lambda c: True),
        ],
        ctx,
        backend,
        output=out,
    )
    assert [r.as_bool() for r in results] == [True, False, True]
    assert results[0].reason == "period"
    assert seen[0].as_list()[-1] is out  # the output was appended to the real context
    assert backend.generate_calls == [] and backend.score_calls == []


async def test_async_validation_fn_is_awaited_and_bad_return_type_rejected():
    async def fine(ctx):
        return False

    ctx, out = conversation()
    backend = ScriptedBackend.scripted()
    [result] = await avalidate(Requirement(None, fine), ctx, backend, output=out)
    assert result.as_bool() is False
    with pytest.raises(TypeError, match="ValidationResult or a bool"):
        await avalidate(Requirement(None, lambda c: "yes"), ctx, backend, output=out)


async def test_plain_requirements_go_to_the_adapter_as_one_batch_and_read_the_score():
    backend = ScriptedBackend.scripted(
        scores=[rc(0.91), rc(0.2), rc(0.5)], intrinsics=["requirement-check"]
    )
    ctx, out = conversation()
    reqs = ["mentions Paris", "is in French", "is one word"]
    results = await avalidate(reqs, ctx, backend, output=out)
    assert [r.as_bool() for r in results] == [True, False, False]
    assert [r.score for r in results] == [0.91, 0.2, 0.5]
    assert "mentions Paris" in results[0].reason
    assert len(backend.score_calls) == 1  # one batch, not one call per requirement
    call = backend.score_calls[0]
    assert call.descriptions == reqs and call.intrinsic_name == "requirement-check"
    assert call.ctx.as_list()[-1] is out and call.ctx.as_list()[:-1] == ctx.as_list()
    assert backend.generate_calls == []


async def test_routed_plain_requirement_never_uses_the_yes_no_parser():
    # default_output_to_bool would read this JSON as "no" (mellea trap 1).
    backend = ScriptedBackend.scripted(scores=[rc(0.99)], intrinsics=["requirement-check"])
    ctx, out = conversation()
    r = Requirement("mentions Paris")
    assert r.output_to_bool(rc(0.99)) is False
    [result] = await avalidate([r], ctx, backend, output=out)
    assert result.as_bool() is True


async def test_backend_without_default_routing_asks_the_model_yes_or_no():
    backend = ScriptedBackend.scripted(
        ["yes", "No, it is not."],
        intrinsics=["requirement-check"],
        default_to_constraint_checking_alora=False,
    )
    ctx, out = conversation("Paris.")
    results = await avalidate(["mentions Paris", "is in French"], ctx, backend, output=out)
    assert [r.as_bool() for r in results] == [True, False]
    assert results[0].reason == "mentions Paris"  # a bare yes/no gives the description
    assert results[1].reason == "No, it is not."
    assert results[0].thunk.value == "yes" and results[0].score is None
    assert backend.score_calls == []
    question = backend.generate_calls[0]
    assert isinstance(question.action, Message) and question.action.role == "user"
    assert "Paris." in question.action.content and "mentions Paris" in question.action.content
    assert question.ctx.as_list()[-1] is out  # the judge sees the real conversation


async def test_llmaj_requirement_never_uses_an_adapter():
    backend = ScriptedBackend.scripted(["yes"], intrinsics=["requirement-check"])
    ctx, out = conversation()
    [result] = await avalidate([LLMaJRequirement("mentions Paris")], ctx, backend, output=out)
    assert result.as_bool() and backend.score_calls == [] and len(backend.generate_calls) == 1


async def test_alora_requirements_batch_per_intrinsic():
    backend = ScriptedBackend.scripted(
        scores=[rc(0.8), rc(0.1), rc(0.7)], intrinsics=["requirement-check", "answerability"]
    )
    ctx, out = conversation()
    reqs = [
        ALoraRequirement("short"),
        ALoraRequirement("answerable", intrinsic_name="answerability"),
        ALoraRequirement("polite"),
    ]
    results = await avalidate(reqs, ctx, backend, output=out)
    calls = {c.intrinsic_name: c.descriptions for c in backend.score_calls}
    assert calls == {"requirement-check": ["short", "polite"], "answerability": ["answerable"]}
    assert [r.score for r in results] == [0.8, 0.7, 0.1]


async def test_alora_requirement_without_adapter_is_judged_with_the_yes_no_parser():
    # Its own parser reads JSON and would raise on "yes" (mellea trap 3).
    backend = ScriptedBackend.scripted(["Yes"], intrinsics=[])
    ctx, out = conversation()
    [result] = await avalidate([ALoraRequirement("mentions Paris")], ctx, backend, output=out)
    assert result.as_bool() is True and result.error is None


async def test_mixed_routes_keep_requirement_order():
    backend = ScriptedBackend.scripted(
        ["no"], scores=[rc(0.6), rc(0.3)], intrinsics=["requirement-check"]
    )
    ctx, out = conversation()
    reqs = [
        Requirement("plain one"),
        Requirement(None, lambda c: ValidationResult(True, reason="fn")),
        LLMaJRequirement("judged"),
        ALoraRequirement("adapter"),
    ]
    results = await avalidate(reqs, ctx, backend, output=out)
    assert [r.as_bool() for r in results] == [True, True, False, False]
    assert [r.score for r in results] == [0.6, None, None, 0.3]
    assert results[1].reason == "fn"
    assert backend.score_calls[0].descriptions == ["plain one", "adapter"]


async def test_output_already_last_is_not_appended_again():
    backend = ScriptedBackend.scripted(scores=[rc(0.9)], intrinsics=["requirement-check"])
    ctx, out = conversation()
    ctx = ctx.add(out)
    await avalidate(["x"], ctx, backend, output=out)
    assert backend.score_calls[0].ctx is ctx
    once = Requirement(None, lambda c: c.as_list()[-2:] == [ctx.as_list()[-2], out])
    [result] = await avalidate([once], ctx, backend, output=out)
    assert result.as_bool()


async def test_empty_view_for_an_adapter_check_is_an_error():
    backend = ScriptedBackend.scripted(scores=[rc(0.9)], intrinsics=["requirement-check"])
    ctx = SimpleContext().add(Message("user", "q"))
    with pytest.raises(ValueError, match="empty conversation"):
        await avalidate(["x"], ctx, backend, output=ModelOutputThunk("a"))
    assert backend.score_calls == []


async def test_schema_mismatch_and_bad_json_propagate():
    ctx, out = conversation()
    bad_shape = ScriptedBackend.scripted(
        scores=['{"requirement_check": {"score": 1.5}}'], intrinsics=["requirement-check"]
    )
    with pytest.raises(AdapterSchemaMismatchError):
        await avalidate(["x"], ctx, bad_shape, output=out)
    bad_json = ScriptedBackend.scripted(scores=["score: yes"], intrinsics=["requirement-check"])
    with pytest.raises(json.JSONDecodeError):
        await avalidate([ALoraRequirement("x")], ctx, bad_json, output=out)


async def test_unreadable_judge_verdict_fails_closed_with_the_error():
    def strict(x) -> bool:
        raise KeyError("no verdict")

    backend = ScriptedBackend.scripted(["maybe"])
    ctx, out = conversation()
    r = LLMaJRequirement("x", output_to_bool=strict)
    [result] = await avalidate([r], ctx, backend, output=out)
    assert not result and isinstance(result.error, KeyError) and result.thunk.value == "maybe"


async def test_judge_schema_error_is_not_swallowed():
    backend = ScriptedBackend.scripted(['{"other": 1}'])
    ctx, out = conversation()
    r = LLMaJRequirement("x", output_to_bool=lambda m: ALoraRequirement("y").output_to_bool(m))
    with pytest.raises(AdapterSchemaMismatchError):
        await avalidate([r], ctx, backend, output=out)


async def test_backend_returning_wrong_number_of_scores_is_an_error():
    class Short(ScriptedBackend):
        async def score_requirements(self, ctx, descriptions, **kwargs):
            return [rc(0.9)]

    backend = Short.scripted(intrinsics=["requirement-check"])
    ctx, out = conversation()
    with pytest.raises(MelleaLocalError, match="one result per description"):
        await avalidate(["a", "b"], ctx, backend, output=out)


async def test_requirement_that_nothing_can_check_is_rejected_before_any_call():
    backend = ScriptedBackend.scripted(["yes"])
    ctx, out = conversation()
    with pytest.raises(ValueError, match="neither a description"):
        await avalidate([Requirement("fine"), Requirement()], ctx, backend, output=out)
    assert backend.generate_calls == []


async def test_judge_without_any_output_is_an_error():
    backend = ScriptedBackend.scripted(["yes"], default_to_constraint_checking_alora=False)
    ctx, _ = conversation()
    with pytest.raises(ValueError, match="No model output"):
        await avalidate(["x"], ctx, backend)


async def test_judge_accepts_an_assistant_message_as_the_output():
    backend = ScriptedBackend.scripted(["yes"])
    ctx, _ = conversation()
    [result] = await avalidate(["x"], ctx, backend, output=Message("assistant", "Lyon."))
    assert result.as_bool() and "Lyon." in backend.generate_calls[0].action.content


def test_sync_validate_runs_outside_an_event_loop():
    backend = ScriptedBackend.scripted(scores=[rc(0.75)], intrinsics=["requirement-check"])
    ctx, out = conversation()
    [result] = validate("x", ctx, backend, output=out)
    assert result.as_bool() and result.score == 0.75
    assert validate([], ctx, backend) == []


async def test_sync_validate_refuses_inside_a_running_loop():
    ctx, out = conversation()
    with pytest.raises(RuntimeError, match="avalidate"):
        validate(["x"], ctx, ScriptedBackend.scripted(), output=out)


async def test_requirement_validate_method_routes_like_avalidate():
    ctx, out = conversation("Paris.")
    ctx = ctx.add(out)
    routed = ScriptedBackend.scripted(scores=[rc(0.8)], intrinsics=["requirement-check"])
    result = await Requirement("mentions Paris").validate(routed, ctx)
    assert result.as_bool() and result.score == 0.8 and len(routed.score_calls) == 1
    judged = ScriptedBackend.scripted(["  NO "], default_to_constraint_checking_alora=False)
    result = await Requirement("mentions Rome").validate(judged, ctx, model_options={"k": 1})
    assert not result.as_bool() and result.reason == "mentions Rome"
    assert judged.generate_calls[0].model_options == {"k": 1}
    with pytest.raises(AdapterSchemaMismatchError):
        await ALoraRequirement("x").validate(
            ScriptedBackend.scripted(scores=['{"score": 1}'], intrinsics=["requirement-check"]),
            ctx)


class DuckBackend:
    """Not a Backend: offers only generate_from_context (no adapter interface)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    async def generate_from_context(self, action, ctx, *, format=None, model_options=None,
                                    tool_calls=False):
        mot = ModelOutputThunk(self.answer)
        return mot, ctx.add(action).add(mot)


async def test_a_duck_typed_backend_is_never_asked_about_adapters():
    ctx, out = conversation("Paris.")
    result = await Requirement("mentions Paris").validate(DuckBackend("yes"), ctx.add(out))
    assert result.as_bool() and result.reason == "mentions Paris"
