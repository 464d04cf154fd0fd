"""Greedy generation on llama-server is token-identical to LocalHFBackend's on the demo's
prompts: the answer with its thinking, the ReACT agent runs, and JSON-constrained output."""

from __future__ import annotations

import pydantic
from conftest import needs_server

from mellea_local.cli.demo import AGENT_GOALS, QUESTION
from mellea_local.cli.react_cmd import build_tools
from mellea_local.core.context import ChatContext
from mellea_local.messages import Message
from mellea_local.options import ModelOption
from mellea_local.react import react

pytestmark = needs_server

ANSWER_OPTIONS = {ModelOption.MAX_NEW_TOKENS: 64, ModelOption.THINKING: True}


async def _answer(backend, options):
    mot, ctx = await backend.generate_from_context(Message("user", QUESTION), ChatContext(),
                                                   model_options=options)
    await mot.avalue()
    return mot, ctx


async def test_demo_answer_with_thinking_is_token_identical(llama, hf):
    mine, _ = await _answer(llama, ANSWER_OPTIONS)
    ref, _ = await _answer(hf, ANSWER_OPTIONS)
    assert mine.meta["raw_text"] == ref.meta["raw_text"]
    assert (mine.value, mine.thinking, mine.finish_reason) == (
        ref.value, ref.thinking, ref.finish_reason)
    assert mine.usage == ref.usage  # same prompt ids, same number of new ids (EOS counted)


async def test_streamed_deltas_join_to_the_value(llama):
    mot, _ = await llama.generate_from_context(
        Message("user", QUESTION), ChatContext(),
        model_options={**ANSWER_OPTIONS, ModelOption.STREAM: True})
    deltas = []
    while not mot.is_computed():
        deltas.append(await mot.astream())
    assert len([d for d in deltas if d]) > 1
    assert "".join(deltas) == mot.meta["raw_text"]


async def test_demo_react_runs_are_identical(llama, hf):
    for goal, table in AGENT_GOALS:
        runs = []
        for backend in (llama, hf):
            result, ctx = await react(goal, ChatContext(), backend, tools=build_tools(table),
                                      loop_budget=4,
                                      model_options={ModelOption.MAX_NEW_TOKENS: 64})
            runs.append((result.value, [getattr(c, "value", None) for c in ctx.as_list()]))
        assert runs[0] == runs[1], goal


class City(pydantic.BaseModel):
    name: str
    country: str


async def test_format_constrained_output_is_identical(llama, hf):
    outs = []
    for backend in (llama, hf):
        mot, _ = await backend.generate_from_context(
            Message("user", "Name a city and its country as JSON."), ChatContext(),
            format=City, model_options={ModelOption.MAX_NEW_TOKENS: 40})
        await mot.avalue()
        outs.append((mot.value, mot.finish_reason))
    assert outs[0] == outs[1]


async def test_a_session_chats_and_validates_on_llama_server_as_on_hf(llama, hf):
    from mellea_local.core.context import ChatContext as Chat
    from mellea_local.session import MelleaSession

    outs = []
    for backend in (llama, hf):
        session = MelleaSession(backend, Chat())
        reply = await session.achat("What is the capital of France?",
                                    model_options={ModelOption.MAX_NEW_TOKENS: 32})
        [result] = await session.avalidate(["The answer mentions Paris."])
        outs.append((reply.content, bool(result), round(result.score, 2)))
    assert outs[0] == outs[1]
