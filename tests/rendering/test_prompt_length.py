"""A prompt longer than the model's positions is refused before any forward pass (D11)."""

from __future__ import annotations

import pytest
import torch

from mellea_local import CBlock, ChatContext, ModelOption
from mellea_local.errors import PromptTooLongError, UnsupportedInputError
from mellea_local.rendering.prompt import check_prompt_fits, position_limit


class _Forwards:
    """Counts forward passes of a model (a refused prompt must cause none)."""

    def __init__(self, model) -> None:
        self.n = 0
        self._hook = model.register_forward_pre_hook(self._count)

    def _count(self, *args) -> None:
        self.n += 1

    def close(self) -> None:
        self._hook.remove()


def _long_text(tokenizer, tokens: int) -> str:
    word = " seven"
    assert len(tokenizer.encode(word * 10, add_special_tokens=False)) == 10
    return word * tokens


async def test_a_too_long_prompt_is_refused_and_the_backend_stays_usable(bare_backend):
    backend = bare_backend
    limit = backend.model.config.max_position_embeddings
    counter = _Forwards(backend.model)
    try:
        with pytest.raises(PromptTooLongError) as err:
            await backend.generate_from_context(CBlock(_long_text(backend.tokenizer, limit)),
                                                ChatContext())
        assert counter.n == 0
    finally:
        counter.close()
    message = str(err.value)
    assert f"has {limit} positions" in message and "config.max_position_embeddings" in message
    assert "Shorten the conversation" in message
    assert isinstance(err.value, UnsupportedInputError | ValueError)
    mot, _ = await backend.generate_from_context(
        CBlock("What is 3 + 4?"), ChatContext(), model_options={ModelOption.MAX_NEW_TOKENS: 3})
    assert await mot.avalue() is not None


async def test_the_last_position_is_kept_for_generating(bare_backend):
    limit = (bare_backend.model.config.max_position_embeddings, "config")
    check_prompt_fits(limit[0] - 1, limit, "m", generating=True)
    check_prompt_fits(limit[0], limit, "m", generating=False)
    with pytest.raises(PromptTooLongError, match="no position to generate"):
        check_prompt_fits(limit[0], limit, "m", generating=True)


async def test_requirement_checks_are_refused_too(embedded_backend):
    from mellea_local.messages import Message

    backend = embedded_backend
    limit = backend.model.config.max_position_embeddings
    ctx = ChatContext().add(Message("user", _long_text(backend.tokenizer, limit))).add(
        Message("assistant", "7"))
    with pytest.raises(PromptTooLongError, match=f"{limit} positions"):
        await backend.score_requirements(ctx, ["Answer with a number."])


def test_where_the_limit_comes_from(tiny_model, tiny_tokenizer):
    assert position_limit(tiny_model, tiny_tokenizer) == (
        tiny_model.config.max_position_embeddings, "config.max_position_embeddings")

    class Bare(torch.nn.Module):
        config = None

    tiny_tokenizer_limit = tiny_tokenizer.model_max_length
    assert position_limit(Bare(), tiny_tokenizer) == (tiny_tokenizer_limit,
                                                      "tokenizer.model_max_length")

    class Unknown:
        model_max_length = int(1e30)

    assert position_limit(Bare(), Unknown()) is None
    check_prompt_fits(10**6, None, "m", generating=True)  # unknown: not checked
