"""Output rules: likelihood math on both paths, nest, paths, and fast-path eligibility."""

from __future__ import annotations

import logging
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mellea_local.adapters import (
    REQUIREMENT_CHECK_IO_YAML,
    IOConfig,
    LikelihoodRule,
    NestRule,
    TokenLogprob,
    apply_transformations,
    fast_path_spec,
)
from mellea_local.errors import AdapterSchemaMismatchError, IntrinsicOutputError

# The peer's canned requirement-check output: the model chose "no" (logprob -0.546) over "yes"
# (-0.866), and the published result is 0.4206.
LP_NO, LP_YES = -0.546, -0.866
CANNED_SCORE = 0.4206


def expected_yes(lp_yes: float, lp_no: float) -> float:
    return math.exp(lp_yes) / (math.exp(lp_yes) + math.exp(lp_no))


def canned_tokens(chosen: str, top: tuple[tuple[str, float], ...], lp: float) -> list[TokenLogprob]:
    """The generation '{"score": "<chosen>"}' split as the Granite tokenizer splits it."""
    return [
        TokenLogprob('{"', 0.0, (('{"', 0.0),)),
        TokenLogprob("score", 0.0),
        TokenLogprob('":', 0.0),
        TokenLogprob(' "', 0.0),
        TokenLogprob(chosen, lp, top),
        TokenLogprob('"}', 0.0),
    ]


@pytest.fixture(scope="module")
def config() -> IOConfig:
    return IOConfig.load(REQUIREMENT_CHECK_IO_YAML)


@pytest.fixture(scope="module")
def likelihood(config) -> LikelihoodRule:
    return config.transformations[0]


# --- likelihood: the fast path ---------------------------------------------------------------


def test_canned_example_on_the_fast_path(likelihood):
    score = likelihood.score_from_probs({"yes": math.exp(LP_YES), "no": math.exp(LP_NO)})
    assert score == pytest.approx(expected_yes(LP_YES, LP_NO), abs=1e-12)
    assert score == pytest.approx(CANNED_SCORE, abs=1e-3)
    assert score < 0.5  # the canned verdict: not met


def test_fast_path_normalises_and_weights_by_value():
    rule = LikelihoodRule(input_path=("x",), categories_to_values={"low": 0.0, "mid": 0.5,
                                                                    "high": 1.0})
    # Unnormalised masses 1:1:2 -> (0 + 0.5 + 2) / 4.
    assert rule.score_from_probs({"low": 0.1, "mid": 0.1, "high": 0.2}) == pytest.approx(0.625)
    assert rule.score_from_probs({"high": 0.3}) == pytest.approx(1.0)
    assert rule.score_from_probs({"low": 0.0, "high": 0.0}) == 0.0  # no mass: public default


@pytest.mark.parametrize(
    ("probs", "message"),
    [
        ({"maybe": 0.5}, "not a category"),
        ({"yes": -0.1}, ">= 0"),
        ({"yes": math.nan}, ">= 0"),
        ({"yes": math.inf}, ">= 0"),
        ({"yes": "0.5"}, "not a number"),
        ({"yes": True}, "not a number"),
    ],
)
def test_fast_path_refuses_bad_probabilities(likelihood, probs, message):
    with pytest.raises(IntrinsicOutputError, match=message):
        likelihood.score_from_probs(probs)


def test_fast_path_result_is_the_requirement_check_contract(config):
    spec = config.fast_path_spec()
    probs = {"yes": math.exp(LP_YES), "no": math.exp(LP_NO)}
    result = spec.result_from_probs(probs)
    assert list(result) == ["requirement_check"]
    assert result["requirement_check"]["score"] == pytest.approx(expected_yes(LP_YES, LP_NO))
    # Same through apply_transformations with value_probs keyed by field name or path.
    for key in ("score", ("score",)):
        again = config.apply_transformations({"score": "no"}, value_probs={key: probs})
        assert again == result


# --- likelihood: the general path ------------------------------------------------------------


def test_canned_example_on_the_general_path(config):
    # The engine repeats the chosen token among the alternatives; it must count once.
    tokens = canned_tokens("no", (("no", LP_NO), ("yes", LP_YES), ("maybe", -6.0)), LP_NO)
    result = config.apply_transformations({"score": "no"}, logprobs=tokens)
    score = result["requirement_check"]["score"]
    assert score == pytest.approx(expected_yes(LP_YES, LP_NO), abs=1e-12)
    assert score == pytest.approx(CANNED_SCORE, abs=1e-3)


def test_score_from_logprobs_reads_the_rule_path_or_a_given_one(likelihood):
    tokens = canned_tokens("yes", (("no", LP_NO),), LP_YES)
    assert likelihood.score_from_logprobs(tokens) == pytest.approx(expected_yes(LP_YES, LP_NO))
    wildcard = LikelihoodRule(input_path=(None,), categories_to_values={"yes": 1.0, "no": 0.0})
    with pytest.raises(IntrinsicOutputError, match="wildcards"):
        wildcard.score_from_logprobs(tokens)
    assert wildcard.score_from_logprobs(tokens, ("score",)) == pytest.approx(
        expected_yes(LP_YES, LP_NO))


@given(
    lp_yes=st.floats(min_value=-30, max_value=0),
    lp_no=st.floats(min_value=-30, max_value=0),
    chosen_yes=st.booleans(),
)
def test_general_and_fast_paths_agree(lp_yes, lp_no, chosen_yes):
    config = IOConfig.load(REQUIREMENT_CHECK_IO_YAML)
    chosen, lp = ("yes", lp_yes) if chosen_yes else ("no", lp_no)
    other = ("no", lp_no) if chosen_yes else ("yes", lp_yes)
    general = config.apply_transformations(
        {"score": chosen}, logprobs=canned_tokens(chosen, (other,), lp)
    )
    fast = config.fast_path_spec().result_from_probs({"yes": math.exp(lp_yes),
                                                       "no": math.exp(lp_no)})
    assert general["requirement_check"]["score"] == pytest.approx(
        fast["requirement_check"]["score"], abs=1e-9)
    assert 0.0 <= fast["requirement_check"]["score"] <= 1.0


def test_alternatives_map_to_the_first_category_they_prefix(likelihood):
    # "ye" and "y" start "yes"; "n" starts "no"; 'yes"' spells yes and closes the string;
    # "maybe", "" and "nope" name no category.
    top = (("ye", -1.0), ("y", -2.0), ("n", -3.0), ('yes"', -4.0), ("maybe", -0.5),
           ("", -0.1), ("nope", -0.2))
    tokens = canned_tokens("no", top, -1.5)
    result = apply_transformations([likelihood], {"score": "no"}, logprobs=tokens)
    yes = math.exp(-1.0) + math.exp(-2.0) + math.exp(-4.0)
    no = math.exp(-1.5) + math.exp(-3.0)
    assert result["score"] == pytest.approx(yes / (yes + no), abs=1e-12)


def test_first_category_wins_for_an_ambiguous_prefix():
    rule = LikelihoodRule(input_path=("x",), categories_to_values={"no": 0.0, "none": 0.5})
    assert rule.category_for_token("n") == "no"
    assert rule.category_for_token("non") == "none"
    assert rule.category_for_token('no"') == "no"
    assert rule.category_for_token("nob") is None
    assert rule.category_for_token("") is None
    assert rule.category_for_token("no", in_string=False) is None  # strings only in strings


def test_an_emitted_value_outside_the_categories_counts_only_alternatives(likelihood):
    tokens = canned_tokens("maybe", (("yes", -1.0), ("no", -2.0)), -0.1)
    result = apply_transformations([likelihood], {"score": "maybe"}, logprobs=tokens)
    assert result["score"] == pytest.approx(expected_yes(-1.0, -2.0))


def test_no_matching_alternative_scores_zero(likelihood):
    tokens = canned_tokens("maybe", (("perhaps", -1.0),), -0.1)
    assert apply_transformations([likelihood], {"score": "maybe"}, logprobs=tokens) == {
        "score": 0.0}


def test_a_value_starting_mid_token_returns_its_category_value(likelihood):
    # ' "yes' carries the quote and the value: no alternatives exist for the value itself.
    tokens = [TokenLogprob('{"score":', 0.0), TokenLogprob(' "yes', -0.7, (("no", -0.1),)),
              TokenLogprob('"}', 0.0)]
    assert apply_transformations([likelihood], {"score": "yes"}, logprobs=tokens) == {
        "score": 1.0}
    tokens = [TokenLogprob('{"score": "ma', 0.0), TokenLogprob('ybe"}', 0.0)]
    with pytest.raises(IntrinsicOutputError, match="inside a token"):
        apply_transformations([likelihood], {"score": "maybe"}, logprobs=tokens)


def test_non_string_categories_on_the_general_path():
    rule = LikelihoodRule(input_path=(), categories_to_values={True: 1.0, False: 0.0})
    tokens = [TokenLogprob("true", -0.3, (("false", -1.4), ("fal", -5.0), ('"', -2.0)))]
    weight_true, weight_false = math.exp(-0.3), math.exp(-1.4) + math.exp(-5.0)
    assert apply_transformations([rule], True, logprobs=tokens) == pytest.approx(
        weight_true / (weight_true + weight_false))
    assert rule.category_for_token("true,", in_string=False) is True
    assert rule.category_for_token("truex", in_string=False) is None


def test_numbers_and_nested_paths_are_located_in_the_token_text():
    rule = LikelihoodRule(input_path=("a", 1, "v"), categories_to_values={3: 1.0, 4: 0.0})
    text_tokens = ['{"a": [{"v": 1.5e2}, ', '{"v": ', "3", "}]", ', "b": null}']
    tokens = [TokenLogprob(t, 0.0) for t in text_tokens]
    tokens[2] = TokenLogprob("3", -0.2, (("4", -0.9),))
    output = {"a": [{"v": 150.0}, {"v": 3}], "b": None}
    result = apply_transformations([rule], output, logprobs=tokens)
    assert result["a"][1]["v"] == pytest.approx(expected_yes(-0.2, -0.9))
    assert result["a"][0] == {"v": 150.0} and result["b"] is None


def test_logprobs_that_do_not_spell_the_output_are_refused(likelihood):
    tokens = canned_tokens("yes", (("no", -1.0),), -0.5)
    with pytest.raises(IntrinsicOutputError, match="do not belong"):
        apply_transformations([likelihood], {"score": "no"}, logprobs=tokens)
    garbage = [TokenLogprob("not json", 0.0)]
    with pytest.raises(IntrinsicOutputError, match="JSON"):
        apply_transformations([likelihood], {"score": "no"}, logprobs=garbage)
    elsewhere = [TokenLogprob('{"other": "no"}', 0.0)]
    with pytest.raises(IntrinsicOutputError, match="scalar"):
        apply_transformations([likelihood], {"score": "no"}, logprobs=elsewhere)


def test_likelihood_without_evidence_is_refused(likelihood):
    with pytest.raises(IntrinsicOutputError, match="value_probs"):
        apply_transformations([likelihood], {"score": "yes"})


def test_output_without_the_scored_field_is_a_schema_error(config):
    with pytest.raises(AdapterSchemaMismatchError) as info:
        config.apply_transformations({"verdict": "yes"}, value_probs={"score": {"yes": 1.0}})
    assert info.value.observed_keys == {"verdict"}
    assert info.value.expected_keys == {"score"}
    with pytest.raises(AdapterSchemaMismatchError):
        config.apply_transformations(["yes"], value_probs={"score": {"yes": 1.0}})
    with pytest.raises(AdapterSchemaMismatchError):
        config.apply_transformations({"score": {"v": "yes"}}, value_probs={"score": {"yes": 1}})


# --- nest and paths ----------------------------------------------------------------------------


def test_nest_wraps_the_root_or_a_field():
    at_root = NestRule(input_path=(), field_name="outer")
    at_field = NestRule(input_path=("a",), field_name="inner")
    assert apply_transformations([at_root], {"a": 1}) == {"outer": {"a": 1}}
    assert apply_transformations([at_field, at_root], {"a": 1, "b": 2}) == {
        "outer": {"a": {"inner": 1}, "b": 2}}


def test_wildcards_apply_a_rule_to_every_match():
    rule = LikelihoodRule(input_path=("items", None, "label"),
                          categories_to_values={"good": 1.0, "bad": 0.0})
    output = {"items": [{"label": "good"}, {"label": "bad"}]}
    probs = {("items", 0, "label"): {"good": 3.0, "bad": 1.0},
             ("items", 1, "label"): {"good": 1.0, "bad": 1.0}}
    result = apply_transformations([rule], output, value_probs=probs)
    assert result == {"items": [{"label": 0.75}, {"label": 0.5}]}
    assert output == {"items": [{"label": "good"}, {"label": "bad"}]}  # input untouched


def test_a_pattern_matching_nothing_is_a_schema_error():
    rule = NestRule(input_path=("items", 5), field_name="x")
    with pytest.raises(AdapterSchemaMismatchError) as info:
        apply_transformations([rule], {"items": [1, 2]}, name="my-adapter")
    assert info.value.name == "my-adapter"
    assert info.value.observed_keys == {"0", "1"}
    assert info.value.expected_keys == {"5"}


# --- fast-path eligibility -------------------------------------------------------------------


def test_requirement_check_is_eligible_for_the_fast_path(config):
    spec = config.fast_path_spec()
    assert spec.field_name == "score"
    assert spec.json_prefix == '{"score": "'
    assert spec.categories == ("yes", "no")
    assert spec.likelihood is config.transformations[0]


def _schema(**overrides):
    schema = {"type": "object",
              "properties": {"score": {"type": "string", "enum": ["yes", "no"]}},
              "required": ["score"]}
    schema.update(overrides)
    return schema


LIKELIHOOD = LikelihoodRule(input_path=("score",), categories_to_values={"yes": 1.0, "no": 0.0})
NEST = NestRule(input_path=(), field_name="requirement_check")


@pytest.mark.parametrize(
    ("rules", "schema", "reason"),
    [
        (None, _schema(), "not a likelihood"),
        ((NEST, LIKELIHOOD), _schema(), "not a likelihood"),
        ((LIKELIHOOD, LIKELIHOOD), _schema(), "other than nest"),
        ((LikelihoodRule(input_path=(), categories_to_values={"yes": 1.0}),), _schema(),
         "one top-level field"),
        ((LikelihoodRule(input_path=(None,), categories_to_values={"yes": 1.0}),), _schema(),
         "one top-level field"),
        ((LIKELIHOOD,), None, "not a JSON object"),
        ((LIKELIHOOD,), _schema(type="array"), "not a JSON object"),
        ((LIKELIHOOD,), _schema(properties={"score": {"type": "string", "enum": ["yes"]},
                                            "why": {"type": "string"}}), "only property"),
        ((LIKELIHOOD,), _schema(required=[]), "require exactly"),
        ((LIKELIHOOD,), _schema(properties={"score": {"type": "boolean"}}), "string enum"),
        ((LIKELIHOOD,), _schema(properties={"score": {"type": "string"}}), "string enum"),
        ((LIKELIHOOD,), _schema(properties={"score": {"type": "string", "enum": ["yes", 1]}}),
         "non-string"),
        ((LIKELIHOOD,), _schema(properties={"score": {"type": "string",
                                                      "enum": ["yes", "maybe"]}}), "maybe"),
    ],
)
def test_ineligible_configs_are_reported(rules, schema, reason, caplog):
    with caplog.at_level(logging.DEBUG, logger="mellea_local.adapters.transformations"):
        assert fast_path_spec(rules, schema) is None
    assert reason in caplog.text


def test_fast_path_prefix_escapes_the_field_name():
    rule = LikelihoodRule(input_path=('say "hi"',), categories_to_values={"a": 1.0, "b": 0.0})
    schema = {"type": "object", "required": ['say "hi"'],
              "properties": {'say "hi"': {"type": "string", "enum": ["a", "b"]}}}
    spec = fast_path_spec([rule], schema)
    assert spec.json_prefix == '{"say \\"hi\\"": "'
    assert spec.result_from_probs({"a": 1.0, "b": 3.0}) == {'say "hi"': 0.25}
