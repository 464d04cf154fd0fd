"""The input side of an io.yaml: sentence markers, documents, the instruction's last_message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mellea_local.adapters import IOConfig
from mellea_local.errors import InputTypeError, IntrinsicVariableError
from mellea_local.intrinsics.intrinsic import (
    Intrinsic,
    IntrinsicSpec,
    register_intrinsic,
    registered_intrinsics,
)
from mellea_local.intrinsics.rewrite import rewrite_conversation
from mellea_local.messages import Document, Message

IO_YAML = Path(__file__).parent / "io_yaml"
QUESTION = "When do owls hunt? I never see them."
ANSWER = "Owls hunt at night. They sleep by day."
DOCS = [Document("Owls are nocturnal. They hunt at night.", doc_id="d1"),
        Document("Barn owls sleep in the day.", doc_id="d2")]


def config(name: str, **changes: object) -> IOConfig:
    import yaml

    data = yaml.safe_load((IO_YAML / f"{name}.yaml").read_text())
    data.update(changes)
    return IOConfig.from_dict(data, source=name)


def conversation() -> list[Message]:
    return [Message("user", QUESTION), Message("assistant", ANSWER, documents=DOCS)]


def test_citations_marks_the_response_and_documents_and_passes_documents_to_the_template():
    conv = rewrite_conversation(config("citations"), conversation(), frozenset({"documents"}))
    assert [t["content"] for t in conv.turns] == [
        QUESTION, "<r0> Owls hunt at night. <r1> They sleep by day."]
    assert conv.template_kwargs["documents"] == [
        {"text": "<c0> Owls are nocturnal. <c1> They hunt at night.", "doc_id": "d1"},
        {"text": "<c2> Barn owls sleep in the day.", "doc_id": "d2"}]
    assert conv.last_message == conv.turns[-1]["content"]
    table = conv.marked.sentences(["documents"], where="t")
    assert [(s.document_id, s.text) for s in table] == [
        ("d1", "Owls are nocturnal. "), ("d1", "They hunt at night."),
        ("d2", "Barn owls sleep in the day.")]


def test_documents_are_inlined_like_a_generation_when_the_template_has_no_slot():
    conv = rewrite_conversation(config("citations"), conversation(), frozenset())
    assert conv.template_kwargs == {}
    assert conv.turns[-1]["content"] == (
        "<r0> Owls hunt at night. <r1> They sleep by day.\n\n[Document d1]\n<c0> Owls are "
        "nocturnal. <c1> They hunt at night.\n\n[Document d2]\n<c2> Barn owls sleep in the day.")


@pytest.mark.parametrize("mode", ["string", "json", "roles"])
def test_docs_as_message(mode: str) -> None:
    cfg = config("answerability", docs_as_message=mode)
    conv = rewrite_conversation(cfg, conversation(), frozenset({"documents"}))
    assert conv.template_kwargs == {}
    if mode == "string":
        assert conv.turns[0] == {"role": "user", "content": (
            "You have access to the following documents:\n\n[Document d1]\n"
            f"{DOCS[0].text}\n\n[Document d2]\n{DOCS[1].text}")}
    elif mode == "json":
        assert json.loads(conv.turns[0]["content"]) == [
            {"text": DOCS[0].text, "doc_id": "d1"}, {"text": DOCS[1].text, "doc_id": "d2"}]
    else:
        assert conv.turns[:2] == [{"role": "document d1", "content": DOCS[0].text},
                                  {"role": "document d2", "content": DOCS[1].text}]
    assert conv.turns[-1]["content"] == ANSWER and conv.marked is None


def test_attribution_numbers_history_after_the_documents():
    conv = rewrite_conversation(config("context-attribution"), conversation(),
                                frozenset({"documents"}))
    # Documents take c0-c2; the earlier message continues at c3; the response has its own r0...
    assert conv.turns[0]["content"] == "<c3> When do owls hunt? <c4> I never see them."
    assert conv.turns[1]["content"].startswith("<r0> Owls hunt at night.")
    table = conv.marked.sentences(["documents", "all_but_last_message"], where="t")
    assert [(s.message_index, s.begin, s.end) for s in table[3:]] == [(0, 0, 19), (0, 19, 36)]
    assert QUESTION[19:36] == "I never see them."


def test_instruction_last_message_is_filled_from_the_conversation():
    cfg = config("answerability", instruction="Judge: {last_message} / {topic}")
    intrinsic = Intrinsic("answerability", cfg)
    assert intrinsic.variables == {"last_message", "topic"}
    assert intrinsic.instruction({"topic": "owls"}, last_message="Hi.") == "Judge: Hi. / owls"
    with pytest.raises(IntrinsicVariableError, match="last_message"):
        intrinsic.instruction({"topic": "owls", "last_message": "x"}, last_message="Hi.")
    with pytest.raises(IntrinsicVariableError, match="topic"):
        intrinsic.instruction({"topci": "owls"}, last_message="Hi.")


def test_registry_checks_argument_types():
    with pytest.raises(InputTypeError, match="str"):
        register_intrinsic(5, IntrinsicSpec())
    with pytest.raises(InputTypeError, match="IntrinsicSpec"):
        register_intrinsic("my-check", "assistant")
    with pytest.raises(InputTypeError, match="robot"):
        IntrinsicSpec(last_role="robot")
    assert "my-check" not in registered_intrinsics()
