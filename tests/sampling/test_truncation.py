"""An answer cut off at its token budget is marked (``thunk.truncated``) and never judged as
complete: a validation of it says so in every reason, inside sampling too. The
default budget of a call that sets none is 1,024 new tokens, not transformers' 20."""

from __future__ import annotations

import pytest

from mellea_local import (
    ChatContext,
    Message,
    ModelOption,
    RejectionSamplingStrategy,
    Requirement,
    ValidationResult,
    avalidate,
)
from mellea_local.backends.hf.generation import default_budget
from mellea_local.options import DEFAULT_MAX_NEW_TOKENS
from mellea_local.sampling import Instruction

QUESTION = "What is the capital of Japan?"  # ~8 tokens: "The capital of Japan is Tokyo."


def _always(ctx) -> ValidationResult:
    return ValidationResult(True, reason="holds")


async def _answer(backend, budget):
    options = {ModelOption.MAX_NEW_TOKENS: budget} if budget else None
    mot, ctx = await backend.generate_from_context(Message("user", QUESTION), ChatContext(),
                                                   model_options=options)
    await mot.avalue()
    return mot, ctx


async def test_a_cut_answer_is_marked_and_a_whole_one_is_not(shared_embedded_backend):
    cut, _ = await _answer(shared_embedded_backend, 2)
    assert cut.finish_reason == "length" and cut.truncated is True
    assert cut.usage["completion_tokens"] == 2
    whole, _ = await _answer(shared_embedded_backend, 64)
    assert whole.finish_reason == "stop" and whole.truncated is False
    assert whole.value.startswith(cut.value.strip()[:4])  # the same answer, greedy, cut short


async def test_sampling_marks_a_cut_answer_and_its_verdicts(shared_embedded_backend):
    strategy = RejectionSamplingStrategy(loop_budget=2)
    result = await strategy.sample(Instruction(QUESTION), ChatContext(), shared_embedded_backend,
                                   [Requirement("anything", validation_fn=_always)],
                                   model_options={ModelOption.MAX_NEW_TOKENS: 2})
    assert result.truncated and result.chosen.truncated and result.result.truncated
    [verdict] = result.result_validations
    assert "cut off at its token budget" in verdict.reason  # judged, and said to be cut
    whole = await strategy.sample(Instruction(QUESTION), ChatContext(), shared_embedded_backend,
                                  [Requirement("anything", validation_fn=_always)],
                                  model_options={ModelOption.MAX_NEW_TOKENS: 64})
    assert whole.success is True and not whole.truncated
    assert whole.result_validations[0].reason == "holds"


async def test_a_validation_of_a_cut_answer_says_so_in_every_reason(shared_embedded_backend):
    _, ctx = await _answer(shared_embedded_backend, 2)
    reqs = [Requirement("anything", validation_fn=_always),
            Requirement("The response has a number.")]
    results = await avalidate(reqs, ctx, shared_embedded_backend)
    assert len(results) == 2
    for result in results:
        assert "cut off at its token budget" in result.reason
        assert "MAX_NEW_TOKENS" in result.reason
    assert results[0].reason.startswith("holds; ")  # the check's own reason is kept
    assert bool(results[0]) is True  # the verdict is the check's: a part can satisfy it
    _, ctx = await _answer(shared_embedded_backend, 64)
    for result in await avalidate(reqs, ctx, shared_embedded_backend):
        assert "cut off" not in (result.reason or "")


class _Config:
    def __init__(self, max_new_tokens=None, positions=None):
        self.generation_config = type("G", (), {"max_new_tokens": max_new_tokens})()
        self.config = type("C", (), {"max_position_embeddings": positions})()


@pytest.mark.parametrize(("own", "positions", "prompt", "expected"), [
    (None, None, 10, DEFAULT_MAX_NEW_TOKENS),   # nothing set: 1024, not transformers' 20
    (None, 8192, 100, DEFAULT_MAX_NEW_TOKENS),
    (256, 8192, 100, 256),                      # the model's own generation_config wins
    (None, 600, 100, 500),                      # never past the model's positions
])
def test_the_default_budget(own, positions, prompt, expected):
    assert DEFAULT_MAX_NEW_TOKENS == 1024
    assert default_budget(_Config(own, positions), prompt) == expected


async def test_a_call_without_a_budget_is_not_cut_at_20_tokens(tiny_tokenizer):
    """A model whose generation_config sets no budget (as SmolLM2's converted folder): the
    call runs past transformers' 20 new tokens, to the 1,024 default."""
    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.embedded import build_model

    model = build_model(tiny_tokenizer, hidden_size=32, num_layers=1, seed=3)
    model.generation_config.max_new_tokens = None
    model.generation_config.eos_token_id = None  # a random model: never stops by itself
    backend = LocalHFBackend.from_loaded(model, tiny_tokenizer)
    mot, _ = await backend.generate_from_context(Message("user", "hi"), ChatContext())
    await mot.avalue()
    assert mot.truncated and mot.usage["completion_tokens"] == DEFAULT_MAX_NEW_TOKENS
