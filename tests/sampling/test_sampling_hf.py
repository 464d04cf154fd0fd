"""Instruct / validate / repair on a real tiny model (random weights: mechanics, not quality)."""

from __future__ import annotations

import pytest

from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model
from mellea_local.messages import Message
from mellea_local.options import ModelOption
from mellea_local.requirements import Requirement, ValidationResult
from mellea_local.sampling import (
    Instruction,
    MultiTurnStrategy,
    RejectionSamplingStrategy,
    ainstruct,
)


@pytest.fixture
def backend(tiny_tokenizer):
    return LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=5), tiny_tokenizer,
                                      model_id="tiny-sampling")


OPTS = {ModelOption.SEED: 11, "temperature": 1.0, ModelOption.MAX_NEW_TOKENS: 8}


async def test_rejection_sampling_ends_with_a_sample_that_passes(backend):
    """The requirement fails the first sample; the next (a new seed) passes."""
    judged: list[tuple[str, list]] = []

    def differs_from_the_first(ctx) -> ValidationResult:
        text = ctx.last_output().value
        judged.append((text, ctx.as_list()))
        return ValidationResult(text != judged[0][0], reason="same as the first sample")

    base = ChatContext().add(Message("system", "Answer briefly."))
    result = await ainstruct(
        "Name a colour.", base, backend,
        requirements=[Requirement("Differ from the first sample.", differs_from_the_first)],
        strategy=RejectionSamplingStrategy(loop_budget=3), model_options=OPTS,
    )

    assert result.success and result.result_index == 1
    first, second = result.attempts
    assert not first.passed and second.passed
    assert first.sample.value != second.sample.value
    # Validation saw the real conversation: the system turn, the instruction, the sample.
    entries = judged[1][1]
    assert entries[0] is base.as_list()[0] and isinstance(entries[1], Instruction)
    assert entries[2] is second.sample
    # The second attempt re-asked the same prompt: all of it but one token came from the cache.
    prompt_len = second.sample.usage["prompt_tokens"]
    assert backend.stats.last.reused_tokens == prompt_len - 1


async def test_multi_turn_feedback_extends_the_cached_conversation(backend):
    result = await ainstruct(
        "Name a colour.", ChatContext(), backend,
        requirements=[Requirement("Never passes.", lambda ctx: False)],
        strategy=MultiTurnStrategy(loop_budget=2), model_options=OPTS,
    )
    assert not result.success and result.result_index == 1
    first, second = result.attempts
    ids, _, _ = backend.render(None, second.context, add_generation_prompt=False)
    text = backend.tokenizer.decode(ids)
    assert "The following requirements have not been met:\n* Never passes." in text
    # Attempt two's prompt extends attempt one's whole exchange: only the feedback is new.
    prev_total = first.sample.usage["total_tokens"]
    assert second.sample.usage["prompt_tokens"] > prev_total
    assert backend.stats.last.reused_tokens >= prev_total - 1
