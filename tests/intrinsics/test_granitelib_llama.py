"""The granitelib intrinsics on LlamaServerBackend equal LocalHFBackend's: spans identical,
scores within the tolerance the llama-server tests use.

The same random adapters and io.yaml files as ``test_granitelib_intrinsics`` (a base saved as a
folder, exported with ``export_gguf``), one server. The intrinsic side (input rewriting, output
rules) is shared code; what this checks is that both runners feed and read the same tokens.
"""

from __future__ import annotations

import pytest

from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model, save
from mellea_local.intrinsics import core, rag
from mellea_local.messages import Document, Message

from .conftest import BASE_NAME, BASE_SEED
from .test_granitelib_intrinsics import ALORA_INVOCATIONS, DOCS, QUESTION, RESPONSE, _save

pytestmark = pytest.mark.llama_server

TOLERANCE = 2e-3
NAMES = ("citations", "hallucination_detection", "context-attribution", "uncertainty",
         "answerability", "query_rewrite", "guardian-core")


def _binary():
    try:
        from mellea_local.backends.llama_server.launch import find_binary

        return find_binary()
    except Exception:  # no extra, or no binary: the whole module skips
        return None


if _binary() is None:
    pytest.skip("no llama-server binary (the llamacpp extra)", allow_module_level=True)


@pytest.fixture(scope="module")
def pair(tiny_tokenizer, tmp_path_factory):
    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.backends.llama_server import LlamaServerBackend
    from mellea_local.backends.llama_server.gguf_export import export_gguf

    root = tmp_path_factory.mktemp("granitelib-llama")
    base = build_model(tiny_tokenizer, seed=BASE_SEED)
    model_dir = save(base, tiny_tokenizer, root / BASE_NAME)
    library = root / "library"
    for seed, name in enumerate(NAMES):
        kind = "alora" if name in ALORA_INVOCATIONS else "lora"
        _save(tiny_tokenizer, base, library / name / BASE_NAME / kind, name, 300 + seed)
    export_gguf(model_dir, root / "gguf", roots=[library])
    hf = LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=BASE_SEED), tiny_tokenizer,
                                    model_id=BASE_NAME)
    for name in NAMES:
        hf.add_adapter(name, roots=[library])
    with LlamaServerBackend.launch(root / "gguf", servers=1, threads=1, slots=2,
                                   ctx=2048) as llama:
        yield llama, hf


def conversation() -> ChatContext:
    return ChatContext().add(Message("user", "Tell me about owls.")).add(
        Message("assistant", "Owls are birds. Ask me anything."))


def answered() -> ChatContext:
    return conversation().add(Message("user", QUESTION)).add(Message("assistant", RESPONSE))


def test_span_intrinsics_are_identical(pair) -> None:
    llama, hf = pair
    docs = [Document(DOCS[0], doc_id="d1"), Document(DOCS[1], doc_id="d2")]
    for helper in (rag.find_citations, rag.flag_hallucinated_content,
                   core.find_context_attributions):
        mine = helper(RESPONSE, docs, conversation(), llama)
        ref = helper(RESPONSE, docs, conversation(), hf)
        assert mine == ref and mine, helper.__name__


def test_scores_agree_on_the_general_path(pair) -> None:
    """Constrained generation with top-10 logprobs on both runners: the pre-sampling
    distribution, asked again for the whole vocabulary when the top does not decide it
    (``probabilities``), so a likelihood over several categories reads all of them, not the
    chosen one at logprob 0.0 (0.55 vs 0.507 when post-sampling). (The one-forward fast path
    reads llama-server's top 256 candidates only; a random adapter's flat distribution puts
    most digit categories outside them, so it is not compared here.)"""
    import asyncio

    from mellea_local.intrinsics.call import aintrinsic_batch

    llama, hf = pair
    calls = {"uncertainty": {}, "guardian-core": {
        "criteria": "The answer is rude.", "scoring_schema": "Score the last assistant answer."}}
    for name, variables in calls.items():
        [mine] = asyncio.run(aintrinsic_batch(llama, name, answered(), [variables], fast=False))
        [ref] = asyncio.run(aintrinsic_batch(hf, name, answered(), [variables], fast=False))
        [(key, a)] = mine.items()
        b = ref[key]
        a, b = (a["score"], b["score"]) if isinstance(a, dict) else (a, b)
        assert abs(a - b) <= TOLERANCE, (name, a, b)


def test_lora_intrinsics_alone_agree(pair) -> None:
    llama, hf = pair
    assert rag.check_answerability(QUESTION, DOCS, conversation(), llama) == \
        rag.check_answerability(QUESTION, DOCS, conversation(), hf)


def test_lora_after_alora_requests_agrees(pair) -> None:
    """LoRA calls after aLoRA calls on one server. This once failed with a reply without
    'completion_probabilities': not the aLoRA history but the rewrite LoRA's greedy pick, a
    lone UTF-8 lead byte, whose probabilities llama-server withholds; every one-token read
    now bans such tokens from the server's own sampling (``probabilities.unsampleable``)."""
    llama, hf = pair
    docs = [Document(DOCS[0], doc_id="d1"), Document(DOCS[1], doc_id="d2")]
    rag.find_citations(RESPONSE, docs, conversation(), llama)
    assert rag.rewrite_question(QUESTION, conversation(), llama) == \
        rag.rewrite_question(QUESTION, conversation(), hf)
    assert rag.check_answerability(QUESTION, DOCS, conversation(), llama) == \
        rag.check_answerability(QUESTION, DOCS, conversation(), hf)
