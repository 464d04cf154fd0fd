"""Table tests of the io.yaml output rules on hand-made raw outputs, one per shape the public
granitelib data shows: citations over several documents, per-sentence hallucination verdicts,
attributions to earlier messages, rewrites, clarifications, certainty digits, guardian scores.

The marked texts are built with our own splitter (``mark_sentences``), so offsets are checked
against the unmarked texts they must point into.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mellea_local.adapters import IOConfig, TokenLogprob
from mellea_local.adapters.sentences import MarkedInputs, mark_sentences, split_sentences, unmark
from mellea_local.errors import IntrinsicOutputError, IOConfigError

IO_YAML = Path(__file__).parents[1] / "intrinsics" / "io_yaml"

RESPONSE = "Owls hunt at night. They see well in the dark."
DOCS = [("a", "Owls are nocturnal birds. Most owls hunt small mammals."),
        ("b", "Owls have large eyes. Their eyes are adapted to low light.")]
HISTORY = ["Tell me about owls.", "Owls are birds. What do you want to know?",
           "When do they hunt?"]


def config(name: str) -> IOConfig:
    return IOConfig.load(IO_YAML / f"{name}.yaml")


def marked(cfg: IOConfig, *, history: bool = False) -> MarkedInputs:
    tags = cfg.sentence_boundaries
    [last], _ = mark_sentences([RESPONSE], tags["last_message"])
    docs, following = mark_sentences([t for _, t in DOCS], tags.get("documents") or "c")
    past = mark_sentences(HISTORY, tags["all_but_last_message"], following)[0] if history \
        else []
    return MarkedInputs(tags, last_message=last,
                        documents=tuple(zip([d for d, _ in DOCS], docs, strict=True)),
                        history=tuple(past))


def test_splitter_and_unmark_round_trip() -> None:
    assert split_sentences(RESPONSE) == ["Owls hunt at night.", "They see well in the dark."]
    [text], following = mark_sentences([RESPONSE], "r", 3)
    assert text == "<r3> Owls hunt at night. <r4> They see well in the dark." and following == 5
    sentences = unmark(text, "r", 3, where="t")
    assert [(s.begin, s.end) for s in sentences] == [(0, 20), (20, len(RESPONSE))]
    assert "".join(s.text for s in sentences) == RESPONSE
    with pytest.raises(IntrinsicOutputError, match="<r0>"):
        unmark(text, "r", 0, where="t")


def test_citations_over_two_documents() -> None:
    cfg = config("citations")
    raw = [{"r": 0, "c": [0, 1, 1]}, {"r": 1, "c": [3, 2]}, {"r": 1, "c": [3]}, {"r": 0, "c": []}]
    result = cfg.apply_transformations(raw, sentences=marked(cfg), name="citations")
    spans = [(r["response_begin"], r["citation_doc_id"], r["citation_begin"],
              r["citation_end"]) for r in result]
    # Duplicates dropped (last kept, first place), empty citation lists yield nothing, and
    # document offsets restart per document while numbers run on across them.
    assert spans == [(0, "a", 0, 26), (0, "a", 26, 55), (20, "b", 22, 58), (20, "b", 0, 22)]
    for record in result:
        doc = dict(DOCS)[record["citation_doc_id"]]
        assert doc[record["citation_begin"]:record["citation_end"]] == record["citation_text"]
        assert RESPONSE[record["response_begin"]:record["response_end"]] == \
            record["response_text"]
    assert list(result[0]) == ["response_begin", "response_end", "response_text",
                               "citation_doc_id", "citation_begin", "citation_end",
                               "citation_text"]


def test_hallucination_verdicts_per_sentence() -> None:
    cfg = config("hallucination_detection")
    raw = [{"r": 0, "f": "faithful", "e": "doc a says so"},
           {"r": 1, "f": "unfaithful", "e": "not in the documents"}]
    result = cfg.apply_transformations(raw, sentences=marked(cfg))
    assert result == [
        {"response_begin": 0, "response_end": 20, "response_text": "Owls hunt at night. ",
         "faithfulness": "faithful", "explanation": "doc a says so"},
        {"response_begin": 20, "response_end": 46, "response_text": "They see well in the dark.",
         "faithfulness": "unfaithful", "explanation": "not in the documents"}]


def test_attribution_to_documents_and_earlier_messages() -> None:
    cfg = config("context-attribution")
    inputs = marked(cfg, history=True)
    # Documents hold context sentences 0-3; the history continues at 4 (message 0), 5-6
    # (message 1) and 7 (message 2).
    raw = [{"r": 0, "c": [7, 1]}, {"r": 1, "c": [6]}]
    result = cfg.apply_transformations(raw, sentences=inputs)
    got = [(r["response_begin"], r["attribution_doc_id"], r["attribution_msg_index"],
            r["attribution_text"]) for r in result]
    assert got == [(0, None, 2, "When do they hunt?"),
                   (0, "a", None, "Most owls hunt small mammals."),
                   (20, None, 1, "What do you want to know?")]
    second = result[2]
    assert HISTORY[1][second["attribution_begin"]:second["attribution_end"]] == \
        "What do you want to know?"


@pytest.mark.parametrize(("raw", "bad"), [
    ([{"r": 2, "c": [0]}], "sentence number 2 is out of range"),
    ([{"r": 0, "c": [9]}], "sentence number 9 is out of range"),
    ([{"r": -1, "c": [0]}], "sentence number -1"),
    ([{"r": "0", "c": [0]}], 'holds "0"'),
    ([{"r": True, "c": [0]}], "holds true"),
    ([{"r": 0, "c": 3}], "'c' = 3, not a list"),
    ([{"r": 0}], "lacks the field 'c'"),
    ([[0, 1]], "element 0 is [0, 1]"),
    ({"r": 0, "c": [1]}, "needs a list of records"),
])
def test_malformed_citations_name_the_intrinsic_and_value(raw: object, bad: str) -> None:
    cfg = config("citations")
    with pytest.raises(IntrinsicOutputError) as info:
        cfg.apply_transformations(raw, sentences=marked(cfg), name="citations")
    assert "'citations'" in str(info.value) and bad in str(info.value)


def test_empty_output_is_an_empty_result_and_missing_marks_are_refused() -> None:
    cfg = config("citations")
    assert cfg.apply_transformations([], sentences=marked(cfg)) == []
    with pytest.raises(IntrinsicOutputError, match="marked request"):
        cfg.apply_transformations([{"r": 0, "c": [0]}])
    unmarked = MarkedInputs(cfg.sentence_boundaries, last_message=RESPONSE)
    with pytest.raises(IntrinsicOutputError, match="<r0>"):
        cfg.apply_transformations([{"r": 0, "c": [0]}], sentences=unmarked)


def test_hallucination_record_without_a_verdict_is_refused() -> None:
    cfg = config("hallucination_detection")
    with pytest.raises(IntrinsicOutputError, match=r"lacks \['f'\]"):
        cfg.apply_transformations([{"r": 0, "e": "x"}], sentences=marked(cfg))


def test_rewrite_and_clarification_pass_through() -> None:
    assert config("query_rewrite").apply_transformations(
        {"rewritten_question": "When do owls hunt?"}
    ) == {"rewritten_question": "When do owls hunt?"}
    assert config("query_clarification").apply_transformations(
        {"clarification": "CLEAR"}) == {"clarification": "CLEAR"}


def _tokens(text_pieces: list[str], value_index: int, alternatives: dict[str, float],
            chosen_logprob: float) -> list[TokenLogprob]:
    return [TokenLogprob(piece, chosen_logprob if i == value_index else 0.0,
                         tuple(alternatives.items()) if i == value_index else ())
            for i, piece in enumerate(text_pieces)]


def test_certainty_digits_expected_value() -> None:
    cfg = config("uncertainty")
    pieces = ['{"', "score", '":', ' "', "8", '"}']
    alternatives = {"8": math.log(0.6), "9": math.log(0.3), "x": math.log(0.1)}
    tokens = _tokens(pieces, 4, alternatives, math.log(0.6))
    result = cfg.apply_transformations({"score": "8"}, logprobs=tokens)
    assert result == {"certainty": pytest.approx((0.6 * 0.85 + 0.3 * 0.95) / 0.9)}


def test_guardian_score_likelihood() -> None:
    cfg = config("guardian-core")
    pieces = ['{"', "score", '":', ' "', "yes", '"}']
    tokens = _tokens(pieces, 4, {"yes": math.log(0.7), "no": math.log(0.2)}, math.log(0.7))
    result = cfg.apply_transformations({"score": "yes"}, logprobs=tokens)
    assert result == {"guardian": {"score": pytest.approx(0.7 / 0.9)}}


def test_answerability_nests_the_label() -> None:
    assert config("answerability").apply_transformations("unanswerable") == {
        "answerability": "unanswerable"}


MERGE = {"response_format": None, "transformations": [
    {"type": "merge_spans", "input_path": [], "group_fields": ["doc"],
     "begin_field": "begin", "end_field": "end", "text_field": "text"}]}


def test_merge_spans_joins_adjacent_spans_per_group() -> None:
    cfg = IOConfig.from_dict(MERGE, source="merge.yaml")
    raw = [{"doc": "b", "begin": 5, "end": 9, "text": "five"},
           {"doc": "a", "begin": 4, "end": 8, "text": "BBBB"},
           {"doc": "a", "begin": 0, "end": 4, "text": "AAAA"},
           {"doc": "a", "begin": 9, "end": 10, "text": "C"},
           {"doc": "b", "begin": 0, "end": 5, "text": "zero "}]
    assert cfg.apply_transformations(raw) == [
        {"doc": "a", "begin": 0, "end": 8, "text": "AAAABBBB"},
        {"doc": "a", "begin": 9, "end": 10, "text": "C"},
        {"doc": "b", "begin": 0, "end": 9, "text": "zero five"}]


@pytest.mark.parametrize(("raw", "bad"), [
    ([{"doc": "a", "begin": 0, "end": 1, "text": "x"},
      {"doc": "a", "begin": 0, "end": 2, "text": "xy"}], "two spans start at offset 0"),
    ([{"doc": "a", "begin": None, "end": 1, "text": "x"}], "'begin' = null"),
    ([{"doc": "a", "begin": 0, "end": 1, "text": "x", "score": 1}], "fields ['score']"),
])
def test_merge_spans_refuses_malformed_spans(raw: object, bad: str) -> None:
    cfg = IOConfig.from_dict(MERGE, source="merge.yaml")
    with pytest.raises(IntrinsicOutputError, match=bad.replace("[", r"\[").replace("]", r"\]")):
        cfg.apply_transformations(raw, name="spans")


@pytest.mark.parametrize(("rule", "message"), [
    ({"type": "explode", "input_path": []}, "'target_field'"),
    ({"type": "drop_duplicates", "input_path": [], "target_fields": []}, "'target_fields'"),
    ({"type": "project", "input_path": [], "retained_fields": {"a": "x", "b": "x"}},
     "same name"),
    ({"type": "decode_sentences", "input_path": [None, "r"], "source": "everywhere",
      "output_names": {"begin": "b"}}, "'source'"),
    ({"type": "decode_sentences", "input_path": [None, "r"], "source": "last_message",
      "output_names": {"document_id": "d"}}, "document_id"),
    ({"type": "decode_sentences", "input_path": [], "source": "last_message",
      "output_names": {"begin": "b"}}, "must name a field"),
    ({"type": "merge_spans", "input_path": [], "begin_field": "b", "end_field": "b"},
     "names one field twice"),
])
def test_bad_rule_options_are_refused_at_load(rule: dict, message: str) -> None:
    with pytest.raises(IOConfigError, match=message):
        IOConfig.from_dict({"response_format": None, "transformations": [rule]}, source="x")


# --- OpenAI-style exchanges (the shape of recorded requests and model outputs) --------------


def test_citations_from_a_rewritten_chat_completion_request() -> None:
    cfg = config("citations")
    inputs = marked(cfg)
    request = {
        "messages": [{"role": "user", "content": "When do owls hunt?"},
                     {"role": "assistant", "content": inputs.last_message},
                     {"role": "user", "content": cfg.instruction}],
        "extra_body": {"documents": [{"doc_id": d, "text": t} for d, t in inputs.documents]},
    }
    content = ' [{"r": 0, "c": [1, 1]}, {"r": 1, "c": [2]}]'
    result = cfg.result_from_chat_completion(request, content)
    assert [(r["response_text"], r["citation_doc_id"], r["citation_text"]) for r in result] == [
        ("Owls hunt at night. ", "a", "Most owls hunt small mammals."),
        ("They see well in the dark.", "b", "Owls have large eyes. ")]


def test_certainty_from_openai_logprobs() -> None:
    cfg = config("uncertainty")
    pieces = ['{"', "score", '":', ' "', "3", '"}']
    logprobs = {"content": [
        {"token": p, "logprob": math.log(0.5) if p == "3" else 0.0,
         "top_logprobs": ([{"token": "3", "logprob": math.log(0.5)},
                           {"token": "4", "logprob": math.log(0.25)}] if p == "3" else [])}
        for p in pieces]}
    result = cfg.result_from_chat_completion({"messages": []}, "".join(pieces), logprobs)
    assert result == {"certainty": pytest.approx((0.5 * 0.35 + 0.25 * 0.45) / 0.75)}


@pytest.mark.parametrize(("content", "logprobs", "message"), [
    ('[{"r": 0, "c": [1', None, "not JSON"),
    ('{"score": "3"}', {"content": [{"token": "x", "logprob": 0.5}]}, "positive"),
    ('{"score": "3"}', {"content": [{"logprob": -1.0}]}, "not a token entry"),
])
def test_bad_exchanges_are_typed_errors(content: str, logprobs: object, message: str) -> None:
    cfg = config("uncertainty")
    with pytest.raises(IntrinsicOutputError, match=message):
        cfg.result_from_chat_completion({"messages": []}, content, logprobs)


def test_empty_documents_and_turns_hold_no_sentences() -> None:
    cfg = config("context-attribution")
    history = ["Tell me about owls.", "", "When do they hunt?"]
    docs, following = mark_sentences(["", "Owls hunt at night."], "c")
    past, _ = mark_sentences(history, "c", following)
    assert docs[0] == "" and past[1] == ""
    inputs = MarkedInputs(cfg.sentence_boundaries,
                          last_message=mark_sentences([RESPONSE], "r")[0][0],
                          documents=(("e", docs[0]), ("o", docs[1])), history=tuple(past))
    result = cfg.apply_transformations([{"r": 0, "c": [0, 2]}], sentences=inputs)
    assert [(r["attribution_doc_id"], r["attribution_msg_index"], r["attribution_text"])
            for r in result] == [("o", None, "Owls hunt at night."),
                                 (None, 2, "When do they hunt?")]
