"""Requirement objects, verdict parsers and helpers (seed 003)."""

from __future__ import annotations

import json
import math
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mellea_local.core.blocks import CBlock
from mellea_local.core.context import ChatContext
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import AdapterSchemaMismatchError
from mellea_local.messages import Message
from mellea_local.requirements import (
    ALoraRequirement,
    LLMaJRequirement,
    Requirement,
    ValidationResult,
    check,
    default_output_to_bool,
    req,
    reqify,
    requirement_check_score,
    requirement_check_to_bool,
    simple_validate,
)


def rc(score: object) -> str:
    return json.dumps({"requirement_check": {"score": score}})


# ----- requirement_check_to_bool -------------------------------------------------------------


@given(st.floats(min_value=0.0, max_value=1.0))
def test_valid_scores_pass_strictly_above_one_half(p):
    assert requirement_check_to_bool(rc(p)) is (p > 0.5)
    assert requirement_check_score(rc(p)) == p


def test_boundaries_and_integer_scores():
    assert requirement_check_to_bool(rc(0.5)) is False
    assert requirement_check_to_bool(rc(math.nextafter(0.5, 1))) is True
    assert requirement_check_to_bool(rc(1)) is True
    assert requirement_check_to_bool(rc(0)) is False


def test_accepts_cblock_and_thunk_inputs():
    assert requirement_check_to_bool(CBlock(rc(0.9))) is True
    assert requirement_check_to_bool(ModelOutputThunk(rc(0.1))) is False
    with pytest.raises(TypeError):
        requirement_check_to_bool(0.9)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["", "yes", "{'requirement_check': 1}", '{"a": '])
def test_invalid_json_raises_json_decode_error(text):
    with pytest.raises(json.JSONDecodeError):
        requirement_check_to_bool(text)


@pytest.mark.parametrize(
    "output, expected",
    [
        ({"score": 0.9}, {"requirement_check"}),
        ({"requirement_check": 0.9}, {"requirement_check"}),
        ({"requirement_check": {"prob": 0.9}}, {"score"}),
        ({"requirement_check": {"score": True}}, {"score"}),
        ({"requirement_check": {"score": "0.9"}}, {"score"}),
        ({"requirement_check": {"score": None}}, {"score"}),
        ({"requirement_check": {"score": -0.01}}, {"score"}),
        ({"requirement_check": {"score": 1.01}}, {"score"}),
        ([0.9], {"requirement_check"}),
    ],
)
def test_wrong_shapes_raise_schema_mismatch(output, expected):
    with pytest.raises(AdapterSchemaMismatchError) as info:
        requirement_check_to_bool(json.dumps(output))
    assert info.value.expected_keys == expected
    assert info.value.name == "requirement-check"


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_scores_raise_schema_mismatch(literal):
    # Python's json accepts these literals, so they must be rejected explicitly.
    with pytest.raises(AdapterSchemaMismatchError, match="score"):
        requirement_check_to_bool('{"requirement_check": {"score": ' + literal + "}}")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


@given(json_values)
def test_any_score_value_is_a_verdict_or_a_schema_error(score):
    valid = (
        not isinstance(score, bool)
        and isinstance(score, (int, float))
        and math.isfinite(score)
        and 0 <= score <= 1
    )
    try:
        verdict = requirement_check_to_bool(rc(score))
    except AdapterSchemaMismatchError:
        assert not valid
    else:
        assert valid and verdict is (score > 0.5)


def test_schema_error_pickles_and_prints_both_key_sets():
    with pytest.raises(AdapterSchemaMismatchError) as info:
        requirement_check_to_bool(json.dumps({"verdict": 1, "requirement": 2}))
    err = info.value
    assert err.observed_keys == {"verdict", "requirement"}
    text = str(err)
    assert "['requirement', 'verdict']" in text and "['requirement_check']" in text
    clone = pickle.loads(pickle.dumps(err))
    assert str(clone) == text and clone.observed_keys == err.observed_keys
    assert any("io.yaml" in note for note in err.__notes__)  # the note says what to fix


# ----- default_output_to_bool ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("yes", True),
        (" Y ", True),
        ("YES.", True),
        ("I think yes, it does", True),
        ("no", False),
        ("yesterday", False),
        ("y es", False),
        ("", False),
        ('{"requirement_check": {"score": 0.99}}', False),  # why adapters need their own parser
    ],
)
def test_default_output_to_bool(text, verdict):
    assert default_output_to_bool(text) is verdict
    assert default_output_to_bool(ModelOutputThunk(text)) is verdict


# ----- objects and helpers --------------------------------------------------------------------


def test_validation_result_truth_and_error():
    assert bool(ValidationResult(True)) and not ValidationResult(False)
    failed = ValidationResult(True, reason="r", score=0.7, error=ValueError("unreadable"))
    assert failed.result is True and not failed and failed.as_bool() is False
    assert (failed.reason, failed.score) == ("r", 0.7)
    assert "unreadable" in repr(failed)


def test_requirement_defaults_and_shorthands():
    r = Requirement("be short")
    assert (r.description, r.validation_fn, r.check_only) == ("be short", None, False)
    assert r.output_to_bool is default_output_to_bool
    assert req("x").description == "x" and req("x").check_only is False
    assert check("x").check_only is True
    assert r.format_for_llm().args["description"] == "be short"
    assert "be short" in r.judge_prompt("an answer") and "an answer" in r.judge_prompt("an answer")
    with pytest.raises(ValueError, match="description"):
        Requirement(validation_fn=lambda ctx: True).judge_prompt("x")
    with pytest.raises(TypeError):
        Requirement(3)  # type: ignore[arg-type]


def test_reqify():
    r = Requirement("x")
    assert reqify(r) is r
    made = reqify("be polite")
    assert type(made) is Requirement and made.description == "be polite"
    with pytest.raises(TypeError, match="Requirement"):
        reqify(42)  # type: ignore[arg-type]


def test_llmaj_and_alora_requirements():
    assert LLMaJRequirement("x").use_aloras is False
    a = ALoraRequirement("be short")
    assert a.use_aloras is True and a.intrinsic_name == "requirement-check"
    assert a.output_to_bool is requirement_check_to_bool
    assert ALoraRequirement("x", intrinsic_name=None).intrinsic_name == "requirement-check"
    assert ALoraRequirement("x", "answerability").intrinsic_name == "answerability"
    with pytest.raises(ValueError, match="description"):
        ALoraRequirement("  ")


def with_output(text: str | None) -> ChatContext:
    ctx = ChatContext().add(Message("user", "q"))
    return ctx.add(ModelOutputThunk(text)) if text is not None else ctx


def test_simple_validate_bool_tuple_and_static_reason():
    is_short = simple_validate(lambda s: len(s) < 5, reason="too long")
    assert bool(is_short(with_output("tiny"))) is True
    long_result = is_short(with_output("far too long"))
    assert not long_result and long_result.reason == "too long"
    explained = simple_validate(lambda s: (s.islower(), f"{s!r} has capitals"))
    verdict = explained(with_output("Hello"))
    assert not verdict and verdict.reason == "'Hello' has capitals"


def test_simple_validate_without_output_fails_without_calling_fn():
    calls = []
    v = simple_validate(lambda s: calls.append(s) or True)
    result = v(with_output(None))
    assert not result and "No model output" in result.reason and calls == []


@pytest.mark.parametrize("bad", [1, "yes", (True,), (True, 3), None])
def test_simple_validate_rejects_other_return_types(bad):
    with pytest.raises(ValueError, match="bool"):
        simple_validate(lambda s: bad)(with_output("x"))


def test_partial_validation_result_is_tri_state():
    from mellea_local.requirements import PartialValidationResult

    assert [bool(PartialValidationResult(s)) for s in ("pass", "fail", "unknown")] == [
        True, False, False]
    r = PartialValidationResult("fail", reason="too short", score=0.1)
    assert "'fail'" in repr(r) and "too short" in repr(r) and r.thunk is None
    with pytest.raises(ValueError, match="success must be"):
        PartialValidationResult("maybe")
