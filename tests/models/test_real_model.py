"""SmolLM2-135M-Instruct, the registry's real model, end to end (``real_model``: deselected
with a one-line hint when it is not in the cache; CI gets it with `mellea-local models get`)."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def smollm():
    from mellea_local.backends.huggingface import LocalHFBackend

    return LocalHFBackend("smollm2-135m", device="cpu")


def test_the_registered_model_is_the_pinned_conversion(smollm):
    from mellea_local.models import MODELS, verify_converted

    manifest = verify_converted(smollm.model_id)
    assert manifest["source"]["gguf_sha256"] == MODELS["smollm2-135m"].gguf_sha256
    assert smollm.base_model_name == "SmolLM2-135M-Instruct"
    assert len(smollm.tokenizer) == 49152
    assert smollm.model.config.num_hidden_layers == 30
    assert "<|im_start|>" in smollm.tokenizer.chat_template
    assert 134_000_000 < smollm.base_parameter_count < 135_000_000


def test_it_answers_a_factual_question(smollm):
    from mellea_local.core.context import ChatContext
    from mellea_local.messages import Message
    from mellea_local.options import ModelOption

    async def ask() -> str:
        thunk, _ = await smollm.generate_from_context(
            Message("user", "What is the capital of France?"), ChatContext(),
            model_options={ModelOption.MAX_NEW_TOKENS: 16})
        return await thunk.avalue()

    assert "Paris" in asyncio.run(ask())


def test_two_training_steps_on_it_give_an_adapter_that_loads_and_scores(smollm, tmp_path):
    import json

    from mellea_local.core.context import ChatContext
    from mellea_local.intrinsics.requirement_check import requirement_checks
    from mellea_local.messages import Message
    from mellea_local.training import TrainConfig, train_adapter

    answers = [("Paris.", True), ("The capital of France is Paris, a city on the Seine.", False)]
    with open(tmp_path / "d.jsonl", "w", encoding="utf-8") as f:
        for i in range(8):
            answer, short = answers[i % 2]
            f.write(json.dumps({"messages": [
                {"role": "user", "content": f"Capital of France? ({i})"},
                {"role": "assistant", "content": answer}],
                "requirement": "Answer in one word.", "label": short}) + "\n")
    result = train_adapter(TrainConfig(
        data=str(tmp_path / "d.jsonl"), model="smollm2-135m", out_root=str(tmp_path / "lib"),
        max_steps=2, batch_size=4, rank=8, alpha=16, lr=1e-3, validation=0.25, threads=1))
    assert result.path.parts[-3:] == ("requirement-check", "SmolLM2-135M-Instruct", "alora")
    assert result.report["invocation"]["text"] == "<requirements>"
    loaded = smollm.add_adapter("requirement-check", roots=[tmp_path / "lib"])
    ctx = ChatContext().add(Message("user", "Capital of France?")).add(
        Message("assistant", "Paris."))
    scores = requirement_checks(ctx, smollm, ["Answer in one word."], adapter=loaded.name)
    assert 0.0 <= scores[0] <= 1.0
