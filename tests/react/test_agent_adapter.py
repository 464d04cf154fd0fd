"""Agent steps through an agent aLoRA (invoked at the assistant header), on the real tiny model
with real PEFT aLoRAs: the step equals PEFT's own whole-sequence greedy generation, the
grammar changes nothing where the adapted output is already valid, no adapter is left active
after a step or an error, the shared cache keeps base K/V only, and a requirement check after
an agent run reuses the conversation's cache and scores as from scratch."""

from __future__ import annotations

import asyncio

import pytest
import torch
from adapter_folders import WEIGHTS

from mellea_local.adapters import AGENT_IO_YAML
from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.backend import AGENT
from mellea_local.core.context import ChatContext
from mellea_local.embedded.random_adapter import save_random_adapter
from mellea_local.errors import AdapterNotFoundError, ModelOptionTypeError
from mellea_local.intrinsics.requirement_check import arequirement_check
from mellea_local.messages import Message
from mellea_local.options import ModelOption
from mellea_local.react import react
from mellea_local.react.components import ReactInitiator, ReactThought
from mellea_local.tools import calculator
from mellea_local.training.agent import invocation_ids

GOALS = ["What is 12 * 7?", "What is (3 + 4) * 5?", "What is 9 - 2?"]
SCORE_TOLERANCE = 1e-4
"""A check read through the reused cache against one prefilled from scratch: the same
arithmetic in a different chunking (float32), so equal up to rounding."""


@pytest.fixture(scope="module")
def agent_dirs(tmp_path_factory):
    """Two random agent aLoRAs on the shipped tiny model, invoked by its assistant header:
    ``strong`` (B * 40: it visibly changes the steps) and ``mild`` (B * 0.3: the model's
    own valid calls stay valid)."""
    torch.set_num_threads(1)
    base = LocalHFBackend(WEIGHTS, device="cpu", dtype=torch.float32)
    header = invocation_ids(base.tokenizer)
    root = tmp_path_factory.mktemp("agent-adapters")
    out = {}
    for name, scale in (("strong", 40.0), ("mild", 0.3)):
        out[name] = save_random_adapter(
            base.model, base.tokenizer, root / name / AGENT / "mellea-tiny-chat" / "alora",
            alora=True, invocation=header, io_yaml=AGENT_IO_YAML.read_text(), scale=scale,
            seed=3)
    return out


def _backend(adapter=None, **kwargs):
    backend = LocalHFBackend(WEIGHTS, device="cpu", dtype=torch.float32, **kwargs)
    if adapter is not None:
        backend.add_adapter(adapter, intrinsic=AGENT)
    return backend


async def _step(backend, action, ctx, **opts):
    options = {ModelOption.MAX_NEW_TOKENS: 32, ModelOption.CONSTRAIN_TOOL_CALLS: False, **opts}
    mot, new_ctx = await backend.generate_from_context(action, ctx, tool_calls=True,
                                                       model_options=options)
    await mot.avalue()
    return mot, new_ctx


def _peft_reference(adapter_dir, prompt_ids, max_new_tokens, base=WEIGHTS):
    """PEFT's own greedy generation with the aLoRA, the whole sequence fed at once."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft = PeftModel.from_pretrained(model, str(adapter_dir)).eval()
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        out = peft.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                            do_sample=False, max_new_tokens=max_new_tokens)
    return out[0, len(prompt_ids):].tolist()


def _decoded(backend, ids):
    return backend.tokenizer.decode(ids, skip_special_tokens=True)


def test_the_step_equals_peft_s_whole_sequence_greedy_generation(agent_dirs):
    """Two steps of one run, the second's prompt continuing the first's (its cached base
    prefix reused, an earlier header inside it): each equals PEFT's generation from scratch,
    and differs from the base model's (the adapter acts)."""
    backend = _backend(agent_dirs["strong"])
    init = ReactInitiator(GOALS[0], [calculator])
    ids, _, _ = backend.render(init, ChatContext(), tool_calls=True)
    mot, ctx = asyncio.run(_step(backend, init, ChatContext()))
    assert mot.meta["agent_adapter"] == "agent_alora"
    reference = _peft_reference(agent_dirs["strong"], ids, 32)
    assert mot.meta["raw_text"] == _decoded(backend, reference)
    assert mot.usage["completion_tokens"] == len(reference)
    base, _ = asyncio.run(_step(backend, init, ChatContext(),
                                **{ModelOption.AGENT_ADAPTER: False}))
    assert "agent_adapter" not in base.meta
    assert base.meta["raw_text"] != mot.meta["raw_text"]

    thought = ReactThought()
    ids2, _, _ = backend.render(thought, ctx, tool_calls=True)
    header = invocation_ids(backend.tokenizer)
    second, _ = asyncio.run(_step(backend, thought, ctx))
    last = backend.stats.last
    assert last.reused_tokens >= len(ids) - len(header)  # the first step's prompt, base K/V
    assert last.reused_tokens + last.prefilled_tokens == len(ids2)
    assert ids2[len(ids2) - len(header):] == header
    assert second.meta["raw_text"] == _decoded(backend, _peft_reference(
        agent_dirs["strong"], ids2, 32))


def test_constrained_equals_unconstrained_where_the_adapted_call_is_valid(agent_dirs):
    backend = _backend(agent_dirs["mild"])
    whole = 0
    for goal in GOALS:
        init = ReactInitiator(goal, [calculator])
        free, _ = asyncio.run(_step(backend, init, ChatContext(), **{
            ModelOption.MAX_NEW_TOKENS: 48}))
        held, _ = asyncio.run(_step(backend, init, ChatContext(), **{
            ModelOption.MAX_NEW_TOKENS: 48, ModelOption.CONSTRAIN_TOOL_CALLS: True}))
        assert held.meta["agent_adapter"] == free.meta["agent_adapter"] == "agent_alora"
        assert held.meta.get("tool_grammar") and not free.meta.get("tool_grammar")
        calls = free.tool_calls or []
        if len(calls) == 1 and calls[0].error is None and free.finish_reason != "length":
            whole += 1
            assert held.meta["raw_text"] == free.meta["raw_text"], goal
            assert held.usage == free.usage
    assert whole >= 2


def test_no_adapter_is_left_active_and_the_cache_stays_base(agent_dirs):
    """After a step, after a failing step and after a cancelled one: no live adapter layer,
    the cache holds the conversation up to the header only, with base K/V, and a plain
    generation equals one on a backend without a cache."""
    from mellea_local.backends.hf.generation import GenerationRequest

    backend = _backend(agent_dirs["strong"])
    holder = backend.engine.holder
    init = ReactInitiator(GOALS[1], [calculator])
    ids, _, _ = backend.render(init, ChatContext(), tool_calls=True)
    header = invocation_ids(backend.tokenizer)
    asyncio.run(_step(backend, init, ChatContext()))
    assert holder.active_adapter is None
    holder.assert_base()
    entry, n = backend.prefix_cache.lookup(ids)
    assert n == len(ids) - len(header)  # cropped to before the adapted header

    class Boom:
        def __call__(self, input_ids, scores):
            raise RuntimeError("boom")

    adapter = backend.adapter_for(AGENT)
    with pytest.raises(RuntimeError, match="boom"):
        backend.engine.generate(GenerationRequest(
            prompt_ids=ids, gen_kwargs={"max_new_tokens": 4}, logits_processors=[Boom()],
            adapter=adapter))
    assert holder.active_adapter is None
    holder.assert_base()
    cancelled = GenerationRequest(prompt_ids=ids, gen_kwargs={"max_new_tokens": 4},
                                  adapter=adapter)
    cancelled.cancel.set()
    assert backend.engine.generate(cancelled).cancelled
    holder.assert_base()
    assert backend.prefix_cache.lookup(ids)[1] == len(ids) - len(header)

    # The base K/V stored equal a plain prefill of the same tokens.
    entry, n = backend.prefix_cache.lookup(ids)
    with torch.no_grad():
        plain = backend.model(torch.tensor([ids[:n]]), use_cache=True).past_key_values
    for stored, fresh in zip(entry.cache.layers, plain.layers, strict=True):
        assert torch.allclose(stored.keys[..., :n, :], fresh.keys, atol=1e-5)
        assert torch.allclose(stored.values[..., :n, :], fresh.values, atol=1e-5)

    base_opts = {ModelOption.AGENT_ADAPTER: False, ModelOption.MAX_NEW_TOKENS: 24}
    after, _ = asyncio.run(_step(backend, init, ChatContext(), **base_opts))
    scratch, _ = asyncio.run(_step(_backend(kv_cache_tokens=0), init, ChatContext(),
                                   **base_opts))
    assert after.meta["raw_text"] == scratch.meta["raw_text"]


def test_the_shipped_adapter_is_found_by_model_name_and_the_option_chooses(
        agent_dirs, monkeypatch):
    """Unset: the library's ``agent/<base>/alora`` is admitted on the first tool step (once);
    False: the base; a name: that loaded adapter; an unknown name or a wrong type: typed."""
    import mellea_local.adapters.library as library

    root = agent_dirs["mild"].parents[2]
    monkeypatch.setattr(library, "default_library_roots", lambda: (root,))
    backend = _backend()
    assert backend.adapters == {}
    init = ReactInitiator(GOALS[2], [calculator])
    mot, _ = asyncio.run(_step(backend, init, ChatContext()))
    assert mot.meta["agent_adapter"] == AGENT and list(backend.adapters) == [AGENT]
    assert backend.agent_adapter({ModelOption.AGENT_ADAPTER: False}) is None
    assert backend.agent_adapter({ModelOption.AGENT_ADAPTER: AGENT}).name == AGENT
    with pytest.raises(AdapterNotFoundError):
        backend.agent_adapter({ModelOption.AGENT_ADAPTER: "nope"})
    with pytest.raises(ModelOptionTypeError):
        asyncio.run(_step(backend, init, ChatContext(), **{ModelOption.AGENT_ADAPTER: 1}))
    # Plain generation (no tools asked for) never uses it.
    async def plain():
        mot, _ = await backend.generate_from_context(
            Message("user", "Hi"), ChatContext(), model_options={ModelOption.MAX_NEW_TOKENS: 4})
        await mot.avalue()
        return mot

    assert "agent_adapter" not in asyncio.run(plain()).meta

    monkeypatch.setattr(library, "default_library_roots", lambda: ())
    none = _backend()
    assert none.agent_adapter() is None and none.adapters == {}


def test_a_check_after_an_agent_run_reuses_the_conversation_cache(agent_dirs):
    """After react with the agent aLoRA, a requirement check on the returned context reuses
    the base cache of everything before the last adapted step and recomputes the rest; its
    score equals the scratch path's."""
    from mellea_local.adapters import default_library_roots, find_in_library

    def with_check(**kwargs):
        backend = _backend(agent_dirs["mild"], **kwargs)
        found = find_in_library("requirement-check", WEIGHTS, roots=default_library_roots(),
                                kinds=("alora",))
        backend.add_adapter(found.path, name="check")
        return backend

    backend = with_check()
    out, ctx = asyncio.run(react(GOALS[0], ChatContext(), backend, tools=[calculator],
                                 model_options={ModelOption.MAX_NEW_TOKENS: 48},
                                 loop_budget=4))
    header = invocation_ids(backend.tokenizer)
    last_prompt = backend.render(ReactThought(), ctx, tool_calls=True)[0]
    starts = [i for i in range(len(last_prompt) - len(header) + 1)
              if last_prompt[i:i + len(header)] == header]
    # The user's check of the agent's answer: the answer as the assistant's turn.
    ctx = ctx.add(Message("assistant", str(out.value)))
    requirement = "The answer states the product."
    reused_score = asyncio.run(arequirement_check(ctx, backend, requirement))
    counts = backend.stats.last
    # Reused: everything before the last agent step's header (base K/V); recomputed: that
    # step, its result, the answer and the check's own turn.
    assert counts.reused_tokens == starts[-2]
    scratch = with_check(kv_cache_tokens=0)
    scratch_score = asyncio.run(arequirement_check(ctx, scratch, requirement))
    assert scratch.stats.last.reused_tokens == 0
    assert abs(reused_score - scratch_score) <= SCORE_TOLERANCE


def test_the_cli_says_which_adapter_decodes_the_steps(agent_dirs, monkeypatch):
    """``mellea-local react``: the shipped agent adapter when the library has one for the
    model, named on its own line; --no-agent-adapter and a library without one: none."""
    from typer.testing import CliRunner

    import mellea_local.adapters.library as library
    from mellea_local.cli import app

    root = agent_dirs["mild"].parents[2]
    monkeypatch.setattr(library, "default_library_roots", lambda: (root,))
    args = ["react", GOALS[0], "--model", str(WEIGHTS), "--max-new-tokens", "48",
            "--budget", "3", "--threads", "1"]
    used = CliRunner().invoke(app, args)
    assert used.exit_code == 0, used.output
    assert "agent adapter: agent (alora invoked at the assistant header)" in used.output
    assert "final answer: 84" in used.output
    off = CliRunner().invoke(app, [*args, "--no-agent-adapter"])
    assert "agent adapter: none, steps decoded by the base model (--no-agent-adapter)" in (
        off.output)
    monkeypatch.setattr(library, "default_library_roots", lambda: ())
    none = CliRunner().invoke(app, args)
    assert "agent adapter: none, steps decoded by the base model\n" in none.output


@pytest.mark.real_model
def test_smollm2_step_through_an_agent_alora_at_the_chatml_header(tmp_path):
    """SmolLM2 with an agent aLoRA invoked at ``<|im_start|>assistant\\n``: a constrained
    react step equals PEFT's whole-sequence generation under the same grammar's output, reads
    the prompt's base cache, and leaves it base-only."""
    torch.set_num_threads(1)
    backend = LocalHFBackend("smollm2-135m", device="cpu")
    header = invocation_ids(backend.tokenizer)
    assert backend.tokenizer.decode(header) == "<|im_start|>assistant\n"
    folder = save_random_adapter(backend.model, backend.tokenizer, tmp_path / "alora",
                                 alora=True, invocation=header,
                                 io_yaml=AGENT_IO_YAML.read_text(), scale=0.5, seed=1)
    backend.add_adapter(folder, intrinsic=AGENT)
    init = ReactInitiator(GOALS[0], [calculator])
    ids, _, _ = backend.render(init, ChatContext(), tool_calls=True)
    free, _ = asyncio.run(_step(backend, init, ChatContext()))
    reference = _peft_reference(folder, ids, 32, base=backend.model_id)
    assert free.meta["raw_text"] == _decoded(backend, reference)
    held, _ = asyncio.run(_step(backend, init, ChatContext(),
                                **{ModelOption.CONSTRAIN_TOOL_CALLS: True}))
    assert held.meta["agent_adapter"] == "agent_alora"
    assert len(held.tool_calls or []) == 1 and held.tool_calls[0].error is None
    assert backend.stats.last.reused_tokens == len(ids) - len(header)
    assert backend.prefix_cache.lookup(ids)[1] == len(ids) - len(header)
    backend.engine.holder.assert_base()
