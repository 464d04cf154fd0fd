"""Routing what a program can verify: the mapper, its exactness, and the hook in avalidate."""

from __future__ import annotations

import logging

import pytest

from mellea_local.core.context import ChatContext
from mellea_local.errors import InputTypeError
from mellea_local.messages import Message
from mellea_local.requirements import avalidate
from mellea_local.requirements import verify as v

pytest.importorskip("langdetect")
if v.registry() is None:  # the dev venv has the [verify] extra; a base venv skips these
    pytest.skip("the [verify] extra is not installed", allow_module_level=True)

MAPPED = [
    ("Keep it under 50 words.", "length_constraints:number_words",
     {"relation": "less than", "num_words": 50}),
    ("No more than fifty words.", "length_constraints:number_words",
     {"relation": "less than", "num_words": 51}),
    ("The answer must be at most twenty-five words long.", "length_constraints:number_words",
     {"relation": "less than", "num_words": 26}),
    ("Write at least 120 words.", "length_constraints:number_words",
     {"relation": "at least", "num_words": 120}),
    ("Use one hundred words or more.", "length_constraints:number_words",
     {"relation": "at least", "num_words": 100}),
    ("Reply in ALL CAPS.", "change_case:english_capital", {}),
    ("The whole response is in lower case.", "change_case:english_lowercase", {}),
    ("No commas, please.", "punctuation:no_comma", {}),
    ("End your reply with the exact phrase 'See you soon.'", "startend:end_checker",
     {"end_phrase": "See you soon."}),
    ("Wrap your entire response in double quotation marks.", "startend:quotation", {}),
    ("The response is valid JSON.", "detectable_format:json_format", {}),
    ("Answer with exactly four bullet points.", "detectable_format:number_bullet_lists",
     {"num_bullets": 4}),
    ("Include the keywords 'apple' and 'pear'.", "keywords:existence",
     {"keywords": ["apple", "pear"]}),
    ("The text does not use the word 'revolutionary'.", "keywords:forbidden_words",
     {"forbidden_words": ["revolutionary"]}),
    ("Give it a title in double angular brackets, like <<title>>.", "detectable_format:title",
     {}),
    ("Add a postscript starting with P.S. at the end.", "detectable_content:postscript",
     {"postscript_marker": "P.S."}),
    ("Answer in German.", "language:response_language", {"language": "de"}),
]

REFUSED = [
    "Keep it short.",                                   # no number
    "Keep it to one sentence.",                         # sentences need punkt (or no pattern)
    "The output is a JSON object with the keys \"city\" and \"temperature\".",  # more than JSON
    "The reply is short: two or three sentences at most.",
    "No more than three bullet points.",                # the verifier counts exactly
    "The answer mentions Marie Curie.",                 # unquoted, could be a paraphrase
    "Mention 'a.*b'.",                                  # a regex, not a word
    "End your reply with a question.",                  # not a phrase
    "Answer in English only.",                          # langdetect is not "no foreign words"
    "Open your response with 'Certainly'.",             # the registry has no start verifier
    "Keep it under 50 words and mention 'tea'.",        # two constraints
    "Use fewer than 5 words in ALL CAPS.",              # punkt-only verifier, not installed
    "",
    "Be polite.",
]


@pytest.mark.parametrize(("text", "verifier", "kwargs"), MAPPED)
def test_confident_phrasings_map_to_one_verifier(text, verifier, kwargs):
    mapping = v.map_requirement(text)
    assert mapping == v.Mapping(verifier, kwargs)
    assert v.route(text) == mapping


@pytest.mark.parametrize("text", REFUSED)
def test_ambiguous_or_unverifiable_texts_are_left_to_the_model(text):
    assert v.route(text) is None


def test_punkt_verifiers_are_refused_when_punkt_is_missing():
    mapping = v.map_requirement("Write at least 3 sentences.")
    assert mapping == v.Mapping("length_constraints:number_sentences",
                                {"relation": "at least", "num_sentences": 3})
    assert v.routable(mapping) is v._has_punkt()


ANSWERS = ["Tea is nice.", "TEA IS A WARM DRINK", '"quoted, with a comma"', '{"a": 1}',
           "* one\n* two\n* three\n* four", "<<Tea>>\nA drink.\nP.S. enjoy", "See you soon.",
           " ".join(["word"] * 50), "apple and pear"]


@pytest.mark.parametrize(("text", "verifier", "kwargs"), MAPPED)
def test_the_routed_verdict_is_the_registry_verifier_run_directly(text, verifier, kwargs):
    registry = v.registry()
    for answer in ANSWERS:
        inst = registry[verifier](verifier)
        inst.build_description(**kwargs)
        assert v.verify(v.map_requirement(text), answer) is bool(inst.check_following(answer))


CTX = ChatContext().add(Message("user", "Describe tea.")).add(
    Message("assistant", "Tea is a warm drink, brewed from leaves."))


async def test_routed_requirements_cost_no_forward_and_say_who_decided(shared_embedded_backend):
    before = shared_embedded_backend.stats.total
    results = await avalidate(["Keep it under 5 words.", "No commas, please.",
                               "Write at least 3 words."], CTX, shared_embedded_backend,
                              route=True)
    assert shared_embedded_backend.stats.total == before
    assert [r.result for r in results] == [False, False, True]
    assert [r.score for r in results] == [0.0, 0.0, 1.0]
    assert results[0].reason == (
        "Requirement not satisfied (verified by ifeval length_constraints:number_words("
        "num_words=5, relation='less than')): Keep it under 5 words.")


async def test_routing_is_off_by_default_and_unmapped_texts_go_to_the_adapter(
        shared_embedded_backend):
    off = await avalidate(["Keep it under 5 words."], CTX, shared_embedded_backend)
    mixed = await avalidate(["Keep it under 5 words.", "The reply is about tea."], CTX,
                            shared_embedded_backend, route=True)
    assert "verified by ifeval" not in off[0].reason and "score" in off[0].reason
    assert "verified by ifeval" in mixed[0].reason
    assert "verified by ifeval" not in mixed[1].reason
    assert mixed[1].score == pytest.approx(
        (await avalidate(["The reply is about tea."], CTX, shared_embedded_backend))[0].score)


async def test_route_must_be_a_bool(shared_embedded_backend):
    with pytest.raises(InputTypeError, match="route"):
        await avalidate(["Keep it under 5 words."], CTX, shared_embedded_backend, route="yes")


def test_registry_loads_once(caplog):
    with caplog.at_level(logging.WARNING):
        assert v.registry() is v.registry()
    assert not caplog.records
