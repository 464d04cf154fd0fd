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


def test_it_learns_a_small_slice_by_heart(smollm, tmp_path):
    """The whole pipeline can fit the real model: 8 checks of 4 families (pairs that differ
    only in the answer), 20 steps, and the adapter, loaded and scored through the product path,
    gets every one right (8 rows of make_check_dataset: loss 1.25 -> 0.22 in 12 steps, ~8 s a
    step on 1 thread)."""
    import json

    from mellea_local.intrinsics.requirement_check import requirement_checks
    from mellea_local.messages import chat_context as context_of
    from mellea_local.training import TrainConfig, train_adapter

    rows = [
        ("Tell me about bees. Reply in ALL CAPS.", "BEES MAKE HONEY.", "Reply in ALL CAPS.", True),
        ("Tell me about rain.", "Rain falls from clouds.", "Reply in ALL CAPS.", False),
        ("Explain chess.", "Chess is a board game. What do you play?",
         "End your reply with a question.", True),
        ("Explain chess.", "Chess is a board game.", "End your reply with a question.", False),
        ("Facts on trains?", '{"topic": "trains"}', "Answer with valid JSON only.", True),
        ("Facts on trains?", "Trains run on rails.", "Answer with valid JSON only.", False),
        ("About coffee?", "I can't help with that.", "Decline to answer.", True),
        ("About coffee?", "Coffee is a drink.", "Decline to answer.", False),
    ]
    data = tmp_path / "slice.jsonl"
    data.write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": u}, {"role": "assistant", "content": a}],
        "requirement": r, "label": y}) + "\n" for u, a, r, y in rows), encoding="utf-8")
    result = train_adapter(TrainConfig(
        data=str(data), model="smollm2-135m", out_root=str(tmp_path / "lib"), epochs=20,
        max_steps=20, batch_size=8, lr=1e-3, validation=0.0, threads=1))
    losses = result.report["loss_per_step"]
    assert losses[-1] < losses[0] / 2
    loaded = smollm.add_adapter(str(result.path), name="slice")
    scores = [requirement_checks(context_of((("user", u), ("assistant", a))), smollm, [r],
                                 adapter=loaded.name)[0] for u, a, r, _ in rows]
    assert [s > 0.5 for s in scores] == [y for *_, y in rows], (scores, losses)
