"""Routing what a program can verify: the mapper (positives and near misses), its exactness,
our own rules, the registry's own description texts, and routing as the default of avalidate,
Requirement.validate and check."""

from __future__ import annotations

import json
import logging
import random

import pytest

from mellea_local.core.context import ChatContext
from mellea_local.errors import InputTypeError
from mellea_local.messages import Message
from mellea_local.requirements import ALoraRequirement, LLMaJRequirement, Requirement, avalidate
from mellea_local.requirements import verify as v

pytest.importorskip("langdetect")
if v.registry() is None:  # the dev venv has the [verify] extra; a base venv skips these
    pytest.skip("the [verify] extra is not installed", allow_module_level=True)

WORDS = "length_constraints:number_words"
LESS = "less than"

MAPPED = [
    # word counts: digits and words, under / at most / at least / max
    ("Keep it under 50 words.", WORDS, {"relation": LESS, "num_words": 50}),
    ("Keep the summary under 40 words.", WORDS, {"relation": LESS, "num_words": 40}),
    ("No more than fifty words.", WORDS, {"relation": LESS, "num_words": 51}),
    ("The answer must be at most twenty-five words long.", WORDS,
     {"relation": LESS, "num_words": 26}),
    ("Max 30 words.", WORDS, {"relation": LESS, "num_words": 31}),
    ("100 words max", WORDS, {"relation": LESS, "num_words": 101}),
    ("The reply is no longer than 25 words.", WORDS, {"relation": LESS, "num_words": 26}),
    ("Less than 100 words please", WORDS, {"relation": LESS, "num_words": 100}),
    ("Fewer than 12 words.", WORDS, {"relation": LESS, "num_words": 12}),
    ("Write at least 120 words.", WORDS, {"relation": "at least", "num_words": 120}),
    ("Use one hundred words or more.", WORDS, {"relation": "at least", "num_words": 100}),
    # sentences (IFEval's regex splitter) and paragraphs (blank lines)
    ("Answer in no more than three sentences.", "rule:sentences",
     {"relation": "at most", "num_sentences": 3}),
    ("Keep it to one sentence.", "rule:sentences", {"relation": "exactly", "num_sentences": 1}),
    ("Use exactly 2 sentences.", "rule:sentences", {"relation": "exactly", "num_sentences": 2}),
    ("Write at least four sentences.", "rule:sentences",
     {"relation": "at least", "num_sentences": 4}),
    ("The reply should stay below 2 sentences.", "rule:sentences",
     {"relation": LESS, "num_sentences": 2}),
    ("Keep it to one paragraph.", "rule:paragraphs", {"relation": "exactly",
                                                      "num_paragraphs": 1}),
    ("The answer is a single paragraph.", "rule:paragraphs", {"relation": "exactly",
                                                              "num_paragraphs": 1}),
    ("At most 3 paragraphs.", "rule:paragraphs", {"relation": "at most", "num_paragraphs": 3}),
    # case
    ("Reply in ALL CAPS.", "rule:uppercase", {}),
    ("The headline is in all caps.", "rule:uppercase", {}),
    ("Use uppercase letters only.", "rule:uppercase", {}),
    ("Your entire response should be in English, and in all capital letters.",
     "change_case:english_capital", {}),
    ("The whole response is in lower case.", "rule:lowercase", {}),
    ("all lowercase pls", "rule:lowercase", {}),
    ("No capital letters.", "rule:lowercase", {}),
    ("Don't use any capital letters.", "rule:lowercase", {}),
    ("No caps.", "rule:lowercase", {}),
    # format
    ("No commas, please.", "punctuation:no_comma", {}),
    ("The response contains no commas.", "punctuation:no_comma", {}),
    ("Avoid commas entirely.", "punctuation:no_comma", {}),
    ("The response is valid JSON.", "detectable_format:json_format", {}),
    ("Valid JSON only.", "detectable_format:json_format", {}),
    ("Return only JSON, no explanations.", "detectable_format:json_format", {}),
    ("Wrap your entire response in double quotation marks.", "startend:quotation", {}),
    ("Put the whole reply in double quotes.", "startend:quotation", {}),
    ("Answer with exactly four bullet points.", "detectable_format:number_bullet_lists",
     {"num_bullets": 4}),
    ("Give at least 3 bullet points.", "rule:bullets", {"relation": "at least",
                                                        "num_bullets": 3}),
    ("No more than three bullet points.", "rule:bullets", {"relation": "at most",
                                                           "num_bullets": 3}),
    ("Give it a title in double angular brackets, like <<title>>.", "detectable_format:title",
     {}),
    ("Add a postscript starting with P.S. at the end.", "detectable_content:postscript",
     {"postscript_marker": "P.S."}),
    ("Add a P.S. at the end.", "detectable_content:postscript", {"postscript_marker": "P.S."}),
    ("End with a p.s. note.", "detectable_content:postscript", {"postscript_marker": "P.S."}),
    ("The response contains a code block.", "rule:code_block", {}),
    ("Put the code in a fenced code block.", "rule:code_block", {}),
    ("The response includes a number.", "rule:number", {"digits_only": False}),
    ("Contains at least one digit.", "rule:number", {"digits_only": True}),
    ("No exclamation marks.", "rule:no_exclamation", {}),
    # start and end
    ("End your reply with the exact phrase 'See you soon.'", "startend:end_checker",
     {"end_phrase": "See you soon."}),
    ("Sign off with 'Best, Sam'.", "startend:end_checker", {"end_phrase": "Best, Sam"}),
    ("Start the message with 'Hi team,'.", "rule:starts_with", {"start_phrase": "Hi team,"}),
    ("The reply begins with \"Dear customer\".", "rule:starts_with",
     {"start_phrase": "Dear customer"}),
    ("End with a question.", "rule:ends_with_question", {}),
    ("The response ends with a question to the user.", "rule:ends_with_question", {}),
    ("The reply ends with a question mark.", "rule:ends_with_question", {}),
    ("The last sentence of the response must be a question.", "rule:ends_with_question", {}),
    # words, quoted only
    ("Include the keywords 'apple' and 'pear'.", "rule:includes",
     {"keywords": ["apple", "pear"]}),
    ("Make sure the word 'sustainable' appears.", "rule:includes",
     {"keywords": ["sustainable"]}),
    ("The response mentions the product name 'Lumo'.", "rule:includes",
     {"keywords": ["Lumo"]}),
    ("The text does not use the word 'revolutionary'.", "keywords:forbidden_words",
     {"forbidden_words": ["revolutionary"]}),
    ("Never say 'cheap' or 'budget'.", "keywords:forbidden_words",
     {"forbidden_words": ["cheap", "budget"]}),
    ("Without using the word 'very'.", "keywords:forbidden_words", {"forbidden_words": ["very"]}),
    ("Include a title in << >>.", "detectable_format:title", {}),
    ("The response ends with a P.S.", "detectable_content:postscript",
     {"postscript_marker": "P.S."}),
    ("Write two paragraphs.", "rule:paragraphs", {"relation": "exactly", "num_paragraphs": 2}),
    ("Does not include any email address.", "rule:no_email", {}),
    ("Ask a question at the end.", "rule:ends_with_question", {}),
    ("Mention \"Acme\" at least twice.", "rule:frequency",
     {"keyword": "Acme", "frequency": 2, "relation": "at least"}),
    ("Return the answer as valid JSON.", "detectable_format:json_format", {}),
    ("Use only lowercase.", "rule:lowercase", {}),
    # language
    ("Answer in German.", "language:response_language", {"language": "de"}),
    ("The reply is written entirely in Japanese.", "language:response_language",
     {"language": "ja"}),
    ("The reply is in Spanish.", "language:response_language", {"language": "es"}),
    ("Portuguese only.", "language:response_language", {"language": "pt"}),
]

REFUSED = [
    # no number, or a number of something that is not counted exactly
    "Keep it short.", "The answer is short.", "Be brief.", "Give at most two examples.",
    "The reply is short: two or three sentences at most.", "The plan stays under budget.",
    "Keep the total under 50 euros.", "List at most three options.",
    "Write 3 sentences about cats.",                    # a task, not only a length
    # more than one property, or more than the property
    "The output is a JSON object with the keys \"city\" and \"temperature\".",
    "The response is a JSON list of three strings.",
    "Keep it under 50 words and mention 'tea'.",
    "The tone must be excited, with at least one exclamation point.",
    # unquoted words: a paraphrase may meet them
    "The answer mentions Marie Curie.", "Mentions pricing.", "Doesn't mention pricing.",
    "Does not mention competitors.", "Include the price.", "Avoid jargon.",
    "Mention 'a.*b'.",                                  # a regex, not a word
    # language-like but not a language requirement
    "Written in a French bistro style.", "In a French style.", "Answer in plain English.",
    "Answer in English only.",                          # langdetect is not "no foreign words"
    "Uses British spelling.",
    # case-like
    "Use capital letters.", "Capitalize the first word of each sentence.",
    "The title is capitalized.",
    # end / start-like
    "End on a positive note.", "Ends with a question about the weather.",
    "Open your response with a greeting.", "Start with a summary.",
    # code and numbers, not exact
    "Include a code example.", "The answer contains only code, no explanation.",
    "The response includes a date.", "Uses the exact visitor numbers from the report.",
    "The answer is a bulleted list.",
    # negated, hedged or approximate: not what the program checks
    "The response is not in French.", "The reply does not end with a question.",
    "Not in all caps.", "The answer is not JSON.", "Don't use JSON.", "No bullet points.",
    "Do not start with \"Sure\".", "Never end with a question.", "Under 50 words if possible.",
    "Ideally under 50 words.", "Around 50 words.", "About 100 words.",
    "Roughly three sentences.", "Use JSON for the data part.",
    "Include at least 3 bullet points and a title.",
    # semantic
    "Be polite.", "The reply keeps a professional tone.", "Answers the question.",
    "The response mentions the refund policy.", "The reply apologises to the customer.",
    "Doesn't reveal the customer's email address.",
    "",
]


@pytest.mark.parametrize(("text", "verifier", "kwargs"), MAPPED)
def test_confident_phrasings_map_to_one_program(text, verifier, kwargs):
    mapping = v.map_requirement(text)
    assert mapping == v.Mapping(verifier, kwargs)
    assert v.route(text) == mapping


@pytest.mark.parametrize("text", REFUSED)
def test_near_misses_and_semantic_texts_are_left_to_the_model(text):
    assert v.map_requirement(text) is None
    assert v.route(text) is None


def test_every_registry_description_text_maps_to_its_own_verifier():
    """The canonical IFEval instruction texts (each verifier's build_description, random
    arguments) route to exactly that verifier and those arguments; repeat_prompt needs the
    user's request, taken from the conversation."""
    registry = v.registry()
    random.seed(38)
    for vid, cls in sorted(registry.items()):
        for _ in range(15):
            inst = cls(vid)
            if vid == v.REPEAT:
                desc = inst.build_description(prompt_to_repeat="Why is the sky blue?")
                assert v.route(desc, f"Why is the sky blue? {desc}") == v.Mapping(
                    vid, {"prompt_to_repeat": "Why is the sky blue?"})
                assert v.route(desc) is None  # no conversation: not routed
                continue
            desc = inst.build_description()
            args = {k: val for k, val in (inst.get_instruction_args() or {}).items()
                    if val is not None}
            mapping = v.map_requirement(desc)
            # Sentence counts and capital words go to IFEval's regex splitter (the verifiers
            # need punkt), with their own argument names for the capital words.
            if vid == "change_case:capital_word_frequency":
                assert mapping == v.Mapping("rule:capital_words", {
                    "num_words": args["capital_frequency"],
                    "relation": args["capital_relation"]}), desc
                continue
            expected = "rule:sentences" if vid == "length_constraints:number_sentences" else vid
            assert mapping is not None and mapping.verifier == expected, (desc, mapping)
            assert {k: mapping.kwargs[k] for k in args} == args, (desc, mapping)


def test_capital_words_are_counted_as_ifeval_counts_them_without_punkt():
    assert v.map_requirement("Use fewer than 5 words in ALL CAPS.") is None  # two readings
    text = "In your response, words with all capital letters should appear less than 3 times."
    mapping = v.route(text)
    assert mapping == v.Mapping("rule:capital_words", {"relation": "less than", "num_words": 3})
    assert v.verify(mapping, "Only NASA and the EU, OK?") is False   # NASA, EU, OK
    assert v.verify(mapping, "Only NASA, ok?") is True
    # The registry's own verifier, where punkt is installed, is only ever mapped by hand.
    assert v.routable(v.Mapping("change_case:capital_word_frequency", {})) is v._has_punkt()


ANSWERS = ["Tea is nice.", "TEA IS A WARM DRINK", '"quoted, with a comma"', '{"a": 1}',
           "* one\n* two\n* three\n* four", "<<Tea>>\nA drink.\nP.S. enjoy", "See you soon.",
           " ".join(["word"] * 50), "apple and pear", "Hi team,\n\nDo you agree?",
           "```python\nprint(1)\n```", "Eight legs!", "One. Two. Three."]


@pytest.mark.parametrize(("text", "verifier", "kwargs"),
                         [m for m in MAPPED if not m[1].startswith("rule:")])
def test_the_routed_verdict_is_the_registry_verifier_run_directly(text, verifier, kwargs):
    registry = v.registry()
    for answer in ANSWERS:
        inst = registry[verifier](verifier)
        inst.build_description(**kwargs)
        assert v.verify(v.map_requirement(text), answer) is bool(inst.check_following(answer))


RULE_CASES = [
    ("rule:lowercase", {}, "sunday plans: nap, snack, nap again.", True),
    ("rule:lowercase", {}, "sunday plans: I nap.", False),
    ("rule:lowercase", {}, "c'est très bien, merci.", True),   # any language
    ("rule:uppercase", {}, "FLASH SALE: 30% OFF", True),
    ("rule:uppercase", {}, "Flash Sale: 30% Off", False),
    ("rule:starts_with", {"start_phrase": "Hi team,"}, '  "hi team, the office...', True),
    ("rule:starts_with", {"start_phrase": "Hi team,"}, "Hello team, the office...", False),
    ("rule:ends_with_question", {}, "Would you like express shipping?\n", True),
    ("rule:ends_with_question", {}, 'He asked "why?"', True),
    ("rule:ends_with_question", {}, "Shall we book it? 😊", True),
    ("rule:ends_with_question", {}, "We booked it 😊?!", False),
    ("rule:ends_with_question", {}, "Is it? Let us know.", False),
    ("rule:bullets", {"relation": "at least", "num_bullets": 3}, "- a\n- b\n* c\n", True),
    ("rule:bullets", {"relation": "at least", "num_bullets": 3}, "- a\n**bold**\n-b\n", False),
    ("rule:bullets", {"relation": "at most", "num_bullets": 2}, "• a\n• b\n+ c", False),
    ("rule:paragraphs", {"relation": "exactly", "num_paragraphs": 1}, "One.\nStill one.", True),
    ("rule:paragraphs", {"relation": "exactly", "num_paragraphs": 1}, "One.\n  \nTwo.", False),
    ("rule:code_block", {}, "Use:\n\n```python\nx = 1\n```\n", True),
    ("rule:code_block", {}, "Use `x = 1` inline.", False),
    ("rule:number", {"digits_only": False}, "A spider has eight legs.", True),
    ("rule:number", {"digits_only": False}, "It is one of the best.", False),
    ("rule:number", {"digits_only": True}, "A spider has eight legs.", False),
    ("rule:number", {"digits_only": True}, "Open 9 to 5.", True),
    ("rule:no_exclamation", {}, "Thanks a bunch!", False),
    ("rule:no_email", {}, "Write to a.b+x@example.co.uk today.", False),
    ("rule:includes", {"keywords": ["art"]}, "Start the engine.", False),   # not a substring
    ("rule:includes", {"keywords": ["apple", "AI"]}, "Apples and AI's future.", True),
    ("rule:includes", {"keywords": ["cat"]}, "A category.", False),
    ("rule:frequency", {"keyword": "velvet", "frequency": 2, "relation": "less than"},
     "A velvety coat, velvet soft.", True),
    ("rule:no_email", {}, "Write to us at noon @ the desk.", True),
    ("rule:sentences", {"relation": "at most", "num_sentences": 3},
     "Dr. Smith left at 3.5 p.m. today. He is back. Fine.", True),
    ("rule:sentences", {"relation": "at most", "num_sentences": 3},
     "Tea is good. It is warm. I like it. You too.", False),
]


@pytest.mark.parametrize(("rule", "kwargs", "answer", "expected"), RULE_CASES)
def test_our_rules_are_exact_on_their_documented_meaning(rule, kwargs, answer, expected):
    assert v.verify(v.Mapping(rule, kwargs), answer) is expected


def test_the_reason_names_the_program():
    assert v.Mapping("rule:bullets", {"relation": "at least", "num_bullets": 3}).decider() == (
        "rule bullets(relation='at least', num_bullets=3)")
    assert v.Mapping(WORDS, {"num_words": 5, "relation": LESS}).decider() == (
        "ifeval length_constraints:number_words(num_words=5, relation='less than')")


CTX = ChatContext().add(Message("user", "Describe tea.")).add(
    Message("assistant", "Tea is a warm drink, brewed from leaves."))


async def test_routing_is_the_default_costs_no_forward_and_says_who_decided(
        shared_embedded_backend):
    before = shared_embedded_backend.stats.total
    results = await avalidate(["Keep it under 5 words.", "No commas, please.",
                               "Write at least 3 words.", "End with a question."], CTX,
                              shared_embedded_backend)
    assert shared_embedded_backend.stats.total == before  # no model call at all
    assert [r.result for r in results] == [False, False, True, False]
    assert [r.score for r in results] == [0.0, 0.0, 1.0, 0.0]
    assert results[0].reason == (
        "Requirement not satisfied (verified by ifeval length_constraints:number_words("
        "num_words=5, relation='less than')): Keep it under 5 words.")
    assert results[3].reason == ("Requirement not satisfied (verified by rule "
                                 "ends_with_question()): End with a question.")
    one = await Requirement("Keep it under 5 words.").validate(shared_embedded_backend, CTX)
    assert one.score == 0.0 and "verified by ifeval" in one.reason
    assert shared_embedded_backend.stats.total == before


async def test_route_false_and_named_judges_go_to_the_model(shared_embedded_backend):
    off = await avalidate(["Keep it under 5 words."], CTX, shared_embedded_backend,
                          route=False)
    mixed = await avalidate(["Keep it under 5 words.", "The reply is about tea."], CTX,
                            shared_embedded_backend)
    assert "verified by" not in off[0].reason and "score" in off[0].reason
    assert "verified by ifeval" in mixed[0].reason
    assert "verified by" not in mixed[1].reason
    assert mixed[1].score == pytest.approx(
        (await avalidate(["The reply is about tea."], CTX, shared_embedded_backend,
                         route=False))[0].score)
    method = await Requirement("Keep it under 5 words.").validate(
        shared_embedded_backend, CTX, route=False)
    assert method.score == pytest.approx(off[0].score)
    # An ALoraRequirement / LLMaJRequirement names its judge: never routed.
    [alora] = await avalidate([ALoraRequirement("Keep it under 5 words.")], CTX,
                              shared_embedded_backend)
    assert "verified by" not in alora.reason and alora.score == pytest.approx(off[0].score)
    assert LLMaJRequirement.verifiable is False and Requirement.verifiable is True


async def test_route_must_be_a_bool(shared_embedded_backend):
    with pytest.raises(InputTypeError, match="route"):
        await avalidate(["Keep it under 5 words."], CTX, shared_embedded_backend, route="yes")


async def test_repeat_the_request_is_checked_against_the_conversation(shared_embedded_backend):
    req = "First repeat my request word for word, then answer it."
    user = f"Why is the sky blue? {req}"
    good = ChatContext().add(Message("user", user)).add(
        Message("assistant", "Why is the sky blue? Because of Rayleigh scattering."))
    bad = ChatContext().add(Message("user", user)).add(
        Message("assistant", "Because of Rayleigh scattering."))
    [yes] = await avalidate([req], good, shared_embedded_backend)
    [no] = await avalidate([req], bad, shared_embedded_backend)
    assert (yes.result, no.result) == (True, False)
    assert "combination:repeat_prompt(prompt_to_repeat='Why is the sky blue?')" in yes.reason


def test_registry_loads_once(caplog):
    with caplog.at_level(logging.WARNING):
        assert v.registry() is v.registry()
    assert not caplog.records


async def test_check_routes_by_default_and_records_who_decided(shared_embedded_backend):
    from mellea_local.batch.local import check_item
    from mellea_local.requirements.dataset import parse_line

    line = json.dumps({"messages": [{"role": "user", "content": "Describe tea."},
                                    {"role": "assistant", "content": "Tea is warm."}],
                       "requirements": ["Keep it under 5 words.", "The reply is about tea.",
                                        "End with a question."], "label": [True, True, False]})
    before = shared_embedded_backend.stats.total
    rec = await check_item(shared_embedded_backend, parse_line(1, line), None)
    after = shared_embedded_backend.stats.total
    off = await check_item(shared_embedded_backend, parse_line(1, line), None, route=False)
    assert rec["decided_by"] == [
        "ifeval length_constraints:number_words(num_words=5, relation='less than')", "adapter",
        "rule ends_with_question()"]
    assert rec["scores"][0] == 1.0 and rec["scores"][2] == 0.0
    assert rec["scores"][1] == pytest.approx(off["scores"][1], abs=1e-5)  # batch of 1 vs 3
    assert off["decided_by"] == ["adapter"] * 3
    # Only the unrouted requirement reached the model: one call.
    calls = (after.cache_hits + after.cache_misses) - (before.cache_hits + before.cache_misses)
    assert calls == 1


async def test_a_session_routes_by_default_and_route_false_goes_to_the_model(
        shared_embedded_backend):
    from mellea_local.session import MelleaSession

    m = MelleaSession(shared_embedded_backend, CTX)
    before = shared_embedded_backend.stats.total
    [routed] = await m.avalidate(["Keep it under 5 words."])
    assert shared_embedded_backend.stats.total == before
    assert routed.score == 0.0 and "verified by ifeval" in routed.reason
    [judged] = await m.avalidate(["Keep it under 5 words."], route=False)
    assert "verified by" not in judged.reason
