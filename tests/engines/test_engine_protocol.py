"""Generation goes through one engine method: ``ServingEngine.produce``.

Every registered engine satisfies the protocol, and ``generate_from_context`` adds nothing to
what the engine produces: the thunk's tokens are exactly those of ``await engine.produce``
on the same rendered request. A request the engine refuses up front (``check_request``)
fails in the caller, before a task starts.
"""

from __future__ import annotations

import pytest

from mellea_local.backends.serving import ServingEngine, ServingRequest
from mellea_local.core.blocks import CBlock
from mellea_local.core.context import ChatContext
from mellea_local.errors import PromptTooLongError
from mellea_local.options import ModelOption

GREEDY = {ModelOption.TEMPERATURE: 0.0, ModelOption.MAX_NEW_TOKENS: 6}


def test_every_engine_is_a_serving_engine(engine):
    _name, backend = engine
    assert isinstance(backend.engine, ServingEngine)
    assert isinstance(backend.engine.mixed_adapters, bool)
    assert isinstance(backend.engine.agent_steps, bool)


async def test_the_lifecycle_adds_nothing_to_what_the_engine_produces(engine):
    _name, backend = engine
    action, ctx = CBlock("Name a colour in one word."), ChatContext()
    mot, _ = await backend.generate_from_context(action, ctx, model_options=GREEDY)
    text = str(await mot.avalue())
    ids, _tools, gen_kwargs = backend.render(action, ctx, model_options=GREEDY)
    request = ServingRequest(prompt_ids=ids, gen_kwargs=gen_kwargs)
    backend.engine.check_request(request)
    out = await backend.engine.produce(request)
    assert out.prompt_tokens == len(ids)
    assert mot.usage["completion_tokens"] == len(out.new_ids)
    assert text == backend.tokenizer.decode(out.new_ids, skip_special_tokens=True).strip() \
        or text == backend.tokenizer.decode(out.new_ids, skip_special_tokens=True)


async def test_a_request_the_engine_refuses_fails_in_the_caller(engine):
    """A short prompt asking for more tokens than the engine's context holds: ``render``
    lets it through (the prompt fits), ``check_request`` refuses it before any task."""
    name, backend = engine
    if name == "hf":
        pytest.skip("the HF engine refuses nothing up front: render holds the prompt to "
                    "the model's positions and generation stops at them")
    positions = backend._positions[0]
    with pytest.raises(PromptTooLongError):
        await backend.generate_from_context(CBlock("Hi"), ChatContext(), model_options={
            ModelOption.MAX_NEW_TOKENS: positions})
    again, _ = await backend.generate_from_context(CBlock("Hi"), ChatContext(),
                                                   model_options=GREEDY)
    assert isinstance(await again.avalue(), str)
