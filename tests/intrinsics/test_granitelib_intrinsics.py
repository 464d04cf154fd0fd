"""All 13 catalog intrinsics end to end on the embedded model, through LocalHFBackend.

Hub adapters cannot be fetched here, so each intrinsic gets a random PEFT adapter built for the
test (an aLoRA invoked by the start of its instruction where the io.yaml has one, a LoRA
otherwise) laid out as a library under its catalog name, with our io.yaml for it
(``io_yaml/``). The io.yaml's schema is tightened for the test (sentence numbers within range,
short strings and lists) so a random adapter's constrained output stays decodable; the
results are then checked for the peer's shapes: spans that point into the texts passed, labels
from the enum, probabilities in [0, 1].
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from mellea_local.adapters import CATALOG
from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model
from mellea_local.intrinsics import core, guardian, rag
from mellea_local.intrinsics.guardian_texts import CRITERIA, SCORING_SCHEMAS
from mellea_local.messages import Document, Message

from .conftest import BASE_NAME, BASE_SEED

IO_YAML = Path(__file__).parent / "io_yaml"
QUESTION = "When do owls hunt?"
RESPONSE = "Owls hunt at night. They sleep by day."
DOCS = ["Owls are nocturnal. They hunt at night.", "Barn owls sleep in the day."]
SENTENCES = {"r": 2, "i": 2, "c": 3}  # response sentences; document sentences
ALORA_INVOCATIONS = {  # the start of each instruction (our io.yaml files)
    "requirement-check": "<requirements>", "uncertainty": "<certainty>",
    "citations": "For each", "hallucination_detection": "For each",
    "context-attribution": "For each", "context_relevance": "DOCUMENT:",
    "guardian-core": "<guardian>", "policy-guardrails": "<policy>",
    "factuality-detection": "<factuality>", "factuality-correction": "<correction>",
}


def _tighten(schema: Any, maxima: dict[str, int], field: str | None = None) -> Any:
    """Bound what a random adapter can emit: sentence numbers (by field name) within range,
    short strings, short non-empty lists, no extra keys (a real adapter needs none of this)."""
    if isinstance(schema, dict):
        out = {}
        for key, value in schema.items():
            if key == "properties":
                out[key] = {name: _tighten(sub, maxima, name) for name, sub in value.items()}
            else:
                out[key] = _tighten(value, maxima, field)
        if out.get("type") == "integer" and field in maxima:
            out["maximum"] = maxima[field]
        if out.get("type") == "string" and "enum" not in out:
            out["maxLength"] = 6
        if out.get("type") == "array":
            out["minItems"], out["maxItems"] = 1, 2
        if out.get("type") == "object":
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_tighten(v, maxima, field) for v in schema]
    return schema


# Highest valid sentence number per output field: the response has 2 sentences, the documents
# 3, and for context attribution the earlier messages 3 more (numbered after the documents).
MAXIMA = {"citations": {"r": 1, "c": 2}, "hallucination_detection": {"r": 1},
          "context-attribution": {"r": 1, "c": 5}}


def _io_yaml(name: str) -> str:
    data = yaml.safe_load((IO_YAML / f"{name}.yaml").read_text())
    if data.get("response_format"):
        schema = _tighten(json.loads(data["response_format"]), MAXIMA.get(name, {}))
        data["response_format"] = json.dumps(schema)
    data.setdefault("parameters", {})["max_completion_tokens"] = 96
    return yaml.safe_dump(data, sort_keys=False)


def _save(tokenizer, base, out: Path, name: str, seed: int) -> None:
    from peft import LoraConfig, get_peft_model

    invocation = ALORA_INVOCATIONS.get(name)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM",
        init_lora_weights=False,
        alora_invocation_tokens=(tokenizer.encode(invocation, add_special_tokens=False)
                                 if invocation else None))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        get_peft_model(copy.deepcopy(base), config).save_pretrained(out)
    (out / "io.yaml").write_text(_io_yaml(name))


@pytest.fixture(scope="module")
def library(tiny_tokenizer, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("granitelib")
    base = build_model(tiny_tokenizer, seed=BASE_SEED)
    for seed, name in enumerate(sorted(CATALOG)):
        kind = "alora" if name in ALORA_INVOCATIONS else "lora"
        _save(tiny_tokenizer, base, root / name / BASE_NAME / kind, name, 100 + seed)
    return root


@pytest.fixture(scope="module")
def backend(tiny_tokenizer, library) -> LocalHFBackend:
    backend = LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=BASE_SEED),
                                         tiny_tokenizer, model_id=BASE_NAME)
    for name in sorted(CATALOG):
        backend.add_adapter(name, roots=[library])
    return backend


def conversation() -> ChatContext:
    return ChatContext().add(Message("user", "Tell me about owls.")).add(
        Message("assistant", "Owls are birds. Ask me anything."))


def answered() -> ChatContext:
    return conversation().add(Message("user", QUESTION)).add(Message("assistant", RESPONSE))


def test_every_catalog_intrinsic_is_loaded_from_the_library(backend) -> None:
    assert set(CATALOG) <= {a.intrinsic for a in backend.adapters.values()}


def test_answerability_rewrite_clarification_relevance(backend) -> None:
    docs = DOCS
    assert rag.check_answerability(QUESTION, docs, conversation(), backend) in (
        "answerable", "unanswerable")
    assert isinstance(rag.rewrite_question(QUESTION, conversation(), backend), str)
    assert isinstance(rag.clarify_query(QUESTION, docs, conversation(), backend), str)
    with pytest.warns(DeprecationWarning):
        label = rag.check_context_relevance(QUESTION, DOCS[0], conversation(), backend)
    assert label in ("relevant", "irrelevant", "partially relevant")
    # question=None reads the context's last user turn.
    ctx = conversation().add(Message("user", QUESTION))
    assert rag.check_answerability(None, docs, ctx, backend) in ("answerable", "unanswerable")


def _check_response_spans(records: list[dict[str, Any]]) -> None:
    assert records  # the tightened schema makes every list non-empty
    for record in records:
        span = RESPONSE[record["response_begin"]:record["response_end"]]
        assert span == record["response_text"] and span


def test_citations_spans_point_into_the_response_and_documents(backend) -> None:
    docs = [Document(DOCS[0], doc_id="d1"), Document(DOCS[1], doc_id="d2")]
    records = rag.find_citations(RESPONSE, docs, conversation().add(Message("user", QUESTION)),
                                 backend)
    assert isinstance(records, list)
    _check_response_spans(records)
    texts = {"d1": DOCS[0], "d2": DOCS[1]}
    for record in records:
        assert list(record) == ["response_begin", "response_end", "response_text",
                                "citation_doc_id", "citation_begin", "citation_end",
                                "citation_text"]
        doc = texts[record["citation_doc_id"]]
        assert doc[record["citation_begin"]:record["citation_end"]] == record["citation_text"]
    # The same call with response=None reads the context's last assistant turn.
    again = rag.find_citations(None, docs, answered(), backend)
    assert again == records


def test_hallucination_verdict_per_response_sentence(backend) -> None:
    records = rag.flag_hallucinated_content(RESPONSE, DOCS, conversation(), backend)
    _check_response_spans(records)
    for record in records:
        assert list(record) == ["response_begin", "response_end", "response_text",
                                "faithfulness", "explanation"]
        assert record["faithfulness"] in ("faithful", "partial", "unfaithful", "NA")


def test_context_attribution_to_documents_or_earlier_messages(backend) -> None:
    records = core.find_context_attributions(RESPONSE, DOCS, conversation(), backend)
    _check_response_spans(records)
    history = [m.content for m in conversation().view_for_generation()]
    for record in records:
        if record["attribution_msg_index"] is None:
            source = DOCS[0] + DOCS[1]  # doc ids are not set: either text
            assert record["attribution_text"] in source
        else:
            source = history[record["attribution_msg_index"]]
            assert source[record["attribution_begin"]:record["attribution_end"]] == \
                record["attribution_text"]


def test_core_scores(backend) -> None:
    certainty = core.check_certainty(answered(), backend)
    assert 0.0 <= certainty <= 1.0
    score = core.requirement_check(answered(), backend, "Answer in two sentences.")
    assert 0.0 <= score <= 1.0


def test_guardian(backend) -> None:
    ctx = answered()
    assert guardian.policy_guardrails(ctx, backend, "Never give medical advice.") in (
        "Yes", "No", "Ambiguous")
    risk = guardian.guardian_check(ctx, backend, "The answer is rude to the user.",
                                   "Score the assistant's last answer.")
    assert 0.0 <= risk <= 1.0
    # A short name is the bank's text, byte for byte, and the default scoring schema is the
    # "assistant_response" sentence: the same prompt, so the same score; a different sentence
    # is a different prompt (the random adapter reads it differently).
    by_name = guardian.guardian_check(ctx, backend, "harm")
    by_text = guardian.guardian_check(ctx, backend, CRITERIA["harm"],
                                      SCORING_SCHEMAS["assistant_response"])
    assert by_name == pytest.approx(by_text, abs=1e-6)
    assert guardian.guardian_check(ctx, backend, "harm", "user_prompt") == pytest.approx(
        guardian.guardian_check(ctx, backend, CRITERIA["harm"], SCORING_SCHEMAS["user_prompt"]),
        abs=1e-6)
    assert guardian.guardian_check(ctx, backend, "harm", "Score it.") != pytest.approx(
        by_name, abs=1e-9)
    assert guardian.factuality_detection(ctx, backend, documents=DOCS) in ("yes", "no")
    assert isinstance(guardian.factuality_correction(ctx, backend, documents=DOCS), str)


def test_async_twins_match_the_sync_helpers(backend) -> None:
    async def run() -> tuple[Any, ...]:
        return (await rag.afind_citations(RESPONSE, DOCS, conversation(), backend),
                await core.acheck_certainty(answered(), backend))

    citations, certainty = asyncio.run(run())
    assert citations == rag.find_citations(RESPONSE, DOCS, conversation(), backend)
    assert certainty == pytest.approx(core.check_certainty(answered(), backend), abs=1e-6)


def test_out_of_range_sentence_number_is_a_typed_error_and_the_backend_stays_usable(
        tiny_tokenizer, backend, tmp_path) -> None:
    from mellea_local import intrinsic
    from mellea_local.errors import IntrinsicOutputError

    folder = tmp_path / "bad-citations"
    _save(tiny_tokenizer, build_model(tiny_tokenizer, seed=BASE_SEED), folder, "citations", 7)
    data = yaml.safe_load((folder / "io.yaml").read_text())
    schema = json.loads(data["response_format"])
    schema["items"]["properties"]["r"].update(minimum=7, maximum=7)  # forces sentence 7
    data["response_format"] = json.dumps(schema)
    (folder / "io.yaml").write_text(yaml.safe_dump(data))
    backend.add_adapter(folder, intrinsic="bad-citations")
    turn = Message("assistant", RESPONSE, documents=DOCS)
    with pytest.raises(IntrinsicOutputError, match=r"'bad-citations'.*sentence number 7"):
        intrinsic(backend, "bad-citations", conversation().add(turn))
    assert 0.0 <= core.check_certainty(answered(), backend) <= 1.0


def test_images_are_refused_as_in_generation(backend) -> None:
    from mellea_local.core.blocks import ImageBlock
    from mellea_local.errors import UnsupportedInputError

    png = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAAB"
           "JRU5ErkJggg==")
    ctx = ChatContext().add(Message("user", "What is this?", images=[ImageBlock(png)]))
    with pytest.raises(UnsupportedInputError, match="images"):
        rag.rewrite_question(None, ctx, backend)
    ctx = ctx.add(Message("assistant", RESPONSE))
    with pytest.raises(UnsupportedInputError, match="images"):
        core.requirement_check(ctx, backend, "Be brief.")
