"""LocalHFBackend on a real tiny model: loading, rendering, generation, streaming, parsing."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import pydantic
import pytest
import torch

from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.blocks import ImageBlock
from mellea_local.core.context import ChatContext
from mellea_local.core.tool_call import ModelToolCall
from mellea_local.embedded import build_model
from mellea_local.errors import ModelLoadError, UnsupportedInputError
from mellea_local.messages import Message, ToolMessage
from mellea_local.options import ModelOption

PNG_1PX = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def backend(tiny_tokenizer):
    """A private model (the shared fixture must not be wrapped or mutated)."""
    return LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=1), tiny_tokenizer,
                                      model_id="tiny-llama")


def _forcing(tokenizer, text: str, prompt_len: int):
    """A real generate() constraint that makes the model write exactly ``text`` then stop."""
    forced = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]

    def allowed(batch_id: int, ids: torch.Tensor) -> list[int]:
        step = ids.shape[-1] - prompt_len
        return [forced[min(step, len(forced) - 1)]]

    return allowed


async def _generate_forced(backend, text, ctx=None, action=None, **kw):
    ctx = ctx or ChatContext()
    action = action or Message("user", "hi")
    prompt_len = len(backend.render(action, ctx, tool_calls=kw.get("tool_calls", False),
                                    model_options=kw.get("model_options"))[0])
    opts = dict(kw.pop("model_options", None) or {})
    opts["prefix_allowed_tokens_fn"] = _forcing(backend.tokenizer, text, prompt_len)
    opts.setdefault(ModelOption.MAX_NEW_TOKENS, 200)
    mot, new_ctx = await backend.generate_from_context(action, ctx, model_options=opts, **kw)
    await mot.avalue()
    return mot, new_ctx


# ----- loading -----------------------------------------------------------------------------


def test_loads_from_a_folder_on_cpu_in_float32(tiny_model_dir):
    b = LocalHFBackend(tiny_model_dir, device="cpu")
    assert b.device.type == "cpu"
    assert b.model.dtype == torch.float32
    assert b.tokenizer.chat_template


def test_missing_hub_model_fails_at_once_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError) as err:
        LocalHFBackend("ibm-granite/no-such-model-here", device="cpu")
    msg = str(err.value)
    assert "ibm-granite/no-such-model-here" in msg and "hf download" in msg


def test_pickled_weights_need_an_explicit_opt_in(tiny_model, tiny_tokenizer, tmp_path):
    # transformers 5 only writes safetensors, so write the pickle the old way.
    tiny_model.config.save_pretrained(tmp_path)
    torch.save(tiny_model.state_dict(), tmp_path / "pytorch_model.bin")
    tiny_tokenizer.save_pretrained(tmp_path)
    assert not list(tmp_path.glob("*.safetensors"))
    with pytest.raises(ModelLoadError, match="allow_pickle"):
        LocalHFBackend(tmp_path, device="cpu")
    b = LocalHFBackend(tmp_path, device="cpu", allow_pickle=True)
    assert torch.equal(b.model.lm_head.weight, tiny_model.lm_head.weight)


# ----- rendering ---------------------------------------------------------------------------


def test_renders_a_full_history_exactly(backend):
    call = ModelToolCall("add", None, {"a": 2, "b": 3}, tool_call_id="call_1")
    ctx = (
        ChatContext()
        .add(Message("system", "Be brief."))
        .add(Message("user", "Add 2 and 3."))
        .add(Message("assistant", "", thinking="I need the tool.", tool_calls=[call]))
        .add(ToolMessage("tool", "5", 5, "add", {"a": 2, "b": 3}, call))
        .add(Message("assistant", "It is 5.", thinking="The tool said 5."))
    )
    ids, _, _ = backend.render(Message("user", "Thanks"), ctx)
    assert backend.tokenizer.decode(ids) == (
        "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|>Add 2 and 3.<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|><think>I need the tool.</think>"
        '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call><|end_of_text|>\n'
        "<|start_of_role|>tool_response<|end_of_role|>5<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|><think>The tool said 5.</think>It is 5."
        "<|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|>Thanks<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|>"
    )


def test_thinking_option_reaches_the_template_and_system_prompt_is_prepended(backend):
    ids, _, gen = backend.render(
        Message("user", "Hi"),
        ChatContext(),
        model_options={ModelOption.THINKING: True, ModelOption.SYSTEM_PROMPT: "Sys.",
                       "temperature": 0.7, "enable_thinking": True},
    )
    text = backend.tokenizer.decode(ids)
    assert text.startswith("<|start_of_role|>system<|end_of_role|>Sys.")
    assert text.endswith("<|start_of_role|>assistant<|end_of_role|><think>")
    assert gen == {"temperature": 0.7, "do_sample": True}


def test_tools_are_offered_only_when_tool_calls_is_on(backend):
    spec = {"name": "add", "description": "Add.", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}
    opts = {ModelOption.TOOLS: [spec]}
    without, _, _ = backend.render(Message("user", "Hi"), ChatContext(), model_options=opts)
    with_, tools, _ = backend.render(Message("user", "Hi"), ChatContext(), model_options=opts,
                                     tool_calls=True)
    assert "available_tools" not in backend.tokenizer.decode(without)
    assert backend.tokenizer.decode(with_).startswith(
        "<|start_of_role|>available_tools<|end_of_role|>" + json.dumps(spec))
    assert list(tools) == ["add"]


async def test_images_for_a_text_model_are_refused(backend):
    msg = Message("user", "What is this?", images=[ImageBlock(PNG_1PX)])
    with pytest.raises(UnsupportedInputError, match="text-only"):
        await backend.generate_from_context(msg, ChatContext())


# ----- generation --------------------------------------------------------------------------


async def test_generation_returns_usage_finish_reason_and_new_context(backend):
    ctx = ChatContext()
    action = Message("user", "Hello there")
    mot, new_ctx = await backend.generate_from_context(
        action, ctx, model_options={ModelOption.MAX_NEW_TOKENS: 4, "do_sample": False}
    )
    value = await mot.avalue()
    assert isinstance(value, str)
    assert mot.usage["completion_tokens"] <= 4
    assert mot.usage["prompt_tokens"] == len(backend.render(action, ctx)[0])
    assert mot.finish_reason in {"length", "stop"}
    assert mot.generation.finish_reasons == [mot.finish_reason]
    assert (mot.generation.model, mot.generation.provider) == (backend.model_id, "huggingface")
    assert mot.generation.usage is mot.usage and not mot.generation.streaming
    assert mot.raw.provider == "huggingface" and mot.raw.response == mot.meta["raw_text"]
    assert new_ctx.as_list() == [action, mot]
    assert isinstance(mot.parsed_repr, Message) and mot.parsed_repr.role == "assistant"


async def test_seed_repeats_a_sample_without_touching_the_global_rng(backend):
    opts = {ModelOption.SEED: 123, "temperature": 1.5, ModelOption.MAX_NEW_TOKENS: 12}
    state = torch.get_rng_state()
    outs = []
    for _ in range(2):
        mot, _ = await backend.generate_from_context(
            Message("user", "Tell me something"), ChatContext(), model_options=opts)
        await mot.avalue()
        outs.append(mot.meta["raw_text"])
    assert outs[0] == outs[1]
    assert torch.equal(state, torch.get_rng_state())
    other, _ = await backend.generate_from_context(
        Message("user", "Tell me something"), ChatContext(),
        model_options={**opts, ModelOption.SEED: 7})
    await other.avalue()
    assert other.meta["raw_text"] != outs[0]


async def test_streaming_yields_deltas_that_add_up_to_the_text(backend):
    mot, _ = await backend.generate_from_context(
        Message("user", "Stream please"), ChatContext(),
        model_options={ModelOption.STREAM: True, ModelOption.MAX_NEW_TOKENS: 24,
                       "bad_words_ids": [[i] for i in backend.tokenizer.all_special_ids]},
    )
    deltas = [d async for d in mot]
    assert len(deltas) > 1
    assert "".join(deltas) == mot.meta["raw_text"]


async def test_cancelling_stops_the_generation_thread(backend):
    import time

    mot, _ = await backend.generate_from_context(
        Message("user", "Go on for a long time"), ChatContext(),
        model_options={ModelOption.STREAM: True, ModelOption.MAX_NEW_TOKENS: 3000,
                       "min_new_tokens": 3000},
    )
    await asyncio.sleep(0.2)
    t0 = time.perf_counter()
    mot.cancel_generation()
    # The worker releases the model lock within a few decode steps, long before 3000 tokens.
    while backend.engine.holder.lock.locked() and time.perf_counter() - t0 < 10:
        await asyncio.sleep(0.01)
    assert not backend.engine.holder.lock.locked()
    assert time.perf_counter() - t0 < 5
    assert mot.is_computed()
    # The backend is usable straight away.
    again, _ = await backend.generate_from_context(
        Message("user", "Hi"), ChatContext(), model_options={ModelOption.MAX_NEW_TOKENS: 2})
    assert isinstance(await again.avalue(), str)


async def test_event_loop_stays_responsive_during_generation(backend):
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    t = asyncio.create_task(ticker())
    mot, _ = await backend.generate_from_context(
        Message("user", "Long"), ChatContext(),
        model_options={ModelOption.MAX_NEW_TOKENS: 64, "min_new_tokens": 64})
    await mot.avalue()
    t.cancel()
    assert ticks > 5


# ----- parsing through the backend ---------------------------------------------------------


async def test_thinking_and_tool_calls_are_parsed(backend):
    spec = {"name": "add", "description": "Add two ints.", "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"]}}
    text = ('<think>I should add.</think>'
            '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')
    mot, _ = await _generate_forced(
        backend, text, tool_calls=True, model_options={ModelOption.TOOLS: [spec]})
    assert mot.thinking == "I should add."
    assert mot.value == ""
    assert [c.name for c in mot.tool_calls] == ["add"]
    call = mot.tool_calls[0]
    assert call.args == {"a": 2, "b": 3} and call.error is None and call.tool_call_id
    assert mot.finish_reason == "tool_calls"


async def test_unknown_tool_is_kept_with_an_error(backend):
    text = '<tool_call>{"name": "nope", "arguments": {"x": 1}}</tool_call>'
    mot, _ = await _generate_forced(backend, text, tool_calls=True)
    assert mot.tool_calls[0].error


async def test_unclosed_thinking_is_all_thinking_and_length(backend):
    mot, _ = await _generate_forced(
        backend, "still thinking", model_options={ModelOption.THINKING: True})
    assert mot.thinking == "still thinking"
    assert mot.value == ""
    assert mot.finish_reason == "length"


async def test_a_plain_answer_stops(backend):
    mot, _ = await _generate_forced(backend, "Paris is the capital.")
    assert mot.value == "Paris is the capital."
    assert mot.thinking is None and not mot.tool_calls
    assert mot.finish_reason == "stop"


class Answer(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")  # no free-form extra keys in the grammar

    city: str = pydantic.Field(max_length=12)
    population: int = pydantic.Field(ge=0, le=10**6)
    tags: list[Annotated[str, pydantic.Field(max_length=8)]] = pydantic.Field(max_length=3)


async def test_format_constrains_the_output_to_the_schema(backend):
    mot, _ = await backend.generate_from_context(
        Message("user", "Give me JSON"), ChatContext(), format=Answer,
        model_options={ModelOption.MAX_NEW_TOKENS: 200, ModelOption.SEED: 3,
                       "temperature": 1.0},
    )
    await mot.avalue()
    assert isinstance(mot.parsed_repr, Answer)
    assert Answer.model_validate(json.loads(mot.value)) == mot.parsed_repr


async def test_truncated_structured_output_is_a_clear_error(backend):
    from mellea_local.errors import ComponentParseError

    mot, _ = await backend.generate_from_context(
        Message("user", "Give me JSON"), ChatContext(), format=Answer,
        model_options={ModelOption.MAX_NEW_TOKENS: 3})
    with pytest.raises(ComponentParseError, match="MAX_NEW_TOKENS"):
        await mot.avalue()


# ----- KV prefix reuse ---------------------------------------------------------------------


async def test_second_turn_reuses_the_first_and_matches_no_reuse(tiny_tokenizer):
    model = build_model(tiny_tokenizer, seed=2)
    reuse = LocalHFBackend.from_loaded(model, tiny_tokenizer, model_id="a")
    plain = LocalHFBackend.from_loaded(model, tiny_tokenizer, model_id="b", kv_cache_tokens=0)
    opts = {ModelOption.MAX_NEW_TOKENS: 10, "bad_words_ids":
            [[i] for i in tiny_tokenizer.all_special_ids]}
    results = []
    for b in (reuse, plain):
        ctx = ChatContext()
        texts = []
        for turn in ("First question", "Second question"):
            mot, ctx = await b.generate_from_context(Message("user", turn), ctx,
                                                     model_options=opts)
            await mot.avalue()
            texts.append(mot.meta["raw_text"])
        results.append(texts)
    assert results[0] == results[1]
    assert plain.stats.reused_tokens == 0
    # Turn 2 reused the whole first prompt (at least): only the new turn was prefilled.
    first_prompt = reuse.stats.total.prefilled_tokens - reuse.stats.last.prefilled_tokens
    assert reuse.stats.last.reused_tokens >= first_prompt
    # A hit needs half the offered prefix: this random model's answer re-tokenizes
    # differently, so turn 2 found only its first prompt (11 of 28 tokens) cached.
    last = reuse.stats.last
    assert last.reusable_tokens == first_prompt + last.prefilled_tokens - 1
    assert last.cache_hits == int(last.reused_tokens >= last.reusable_tokens / 2)
    assert reuse.stats.cache_hits + reuse.stats.cache_misses == 2


async def test_a_tool_turn_re_renders_exactly_as_generated(backend):
    """Compact argument JSON is replayed verbatim, so the next turn reuses the whole turn."""
    spec = {"name": "add", "description": "Add.", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"]}}
    text = '<tool_call>{"name": "add", "arguments": {"a":2,"b":3}}</tool_call>'
    mot, ctx = await _generate_forced(backend, text, tool_calls=True,
                                      model_options={ModelOption.TOOLS: [spec]})
    assert mot.tool_calls[0].raw_arguments == '{"a":2,"b":3}'
    ids, _, _ = backend.render(None, ctx, add_generation_prompt=False,
                               model_options={ModelOption.TOOLS: [spec]}, tool_calls=True)
    assert backend.tokenizer.decode(ids).endswith(
        "<|start_of_role|>assistant<|end_of_role|>" + text + "<|end_of_text|>\n")
