"""KV reuse on llama-server, proven by the server's own counts (``timings.prompt_n``), and
the server's caveats the client's ``lora`` rules exist for."""

from __future__ import annotations

import itertools

import httpx
import torch
from conftest import needs_server

from mellea_local.core.context import ChatContext
from mellea_local.intrinsics import arequirement_check
from mellea_local.intrinsics.intrinsic import Intrinsic
from mellea_local.intrinsics.options import scoring_options
from mellea_local.intrinsics.prompt import build_prompts
from mellea_local.intrinsics.scoring import category_tokens
from mellea_local.messages import Message
from mellea_local.options import ModelOption

pytestmark = needs_server

OPTS = {ModelOption.MAX_NEW_TOKENS: 48}


def _auth(backend):
    """The launch's API key: raw HTTP to our servers needs it like the backend does."""
    return {"Authorization": f"Bearer {backend.processes[0].api_key}"}


def _check_row(backend, ctx, requirement):
    adapter = backend.adapter_for("requirement-check")
    intrinsic = Intrinsic.for_adapter(adapter)
    options = scoring_options(None, backend.tokenizer.chat_template)
    [prompt] = build_prompts(backend.tokenizer, intrinsic, adapter, ctx,
                             [{"requirement": requirement}], options)
    return prompt.ids + category_tokens(backend.tokenizer, intrinsic.fast_path).forced, prompt


async def test_check_after_a_generation_prefills_only_its_suffix(llama):
    mot, ctx = await llama.generate_from_context(
        Message("user", "Tell me about the river Seine."), ChatContext(), model_options=OPTS)
    await mot.avalue()
    requirement = "The answer mentions Paris."
    row, _ = _check_row(llama, ctx, requirement)
    await arequirement_check(ctx, llama, requirement)
    # the check's suffix: everything after the conversation (its turn, the forced prefix)
    conversation = llama.render(None, ctx, add_generation_prompt=False)[0]
    assert row[: len(conversation)] == conversation
    suffix = len(row) - len(conversation)
    assert llama.last_call.prefilled_tokens <= suffix + 2
    assert llama.last_call.reused_tokens >= len(conversation) - 2


async def test_react_style_turn_after_checks_prefills_only_its_new_tokens(llama):
    ctx = ChatContext()
    mot, ctx = await llama.generate_from_context(Message("user", "What is 17 * 23?"), ctx,
                                                 model_options=OPTS)
    await mot.avalue()
    for requirement in ("The answer is a number.", "The answer is one word."):
        await arequirement_check(ctx, llama, requirement)
        assert llama.last_call.reused_tokens > 0
    before = llama.render(None, ctx, add_generation_prompt=False)[0]
    mot2, _ = await llama.generate_from_context(Message("user", "And 2 + 2?"), ctx,
                                                   model_options=OPTS)
    await mot2.avalue()
    counts = mot2.meta["cache_counts"]
    new = mot2.usage["prompt_tokens"] - len(before)
    assert 0 < counts.prefilled_tokens <= new + 2, (counts, new)


async def test_base_prompt_that_repeats_the_invocation_clears_the_slot_and_stays_exact(
        llama, hf):
    """The next user turn spells the check's invocation right where the check had it: by
    token match the server would reuse the aLoRA's K/V. The client sends the explicit
    all-zero list (the slot is cleared) and the answer equals PEFT's."""
    ctx = ChatContext().add(Message("user", "Name a colour.")).add(Message("assistant", "Blue."))
    await arequirement_check(ctx, llama, "The answer is one word.")
    turn = Message("user", "<requirements>: name another colour.")
    outs = []
    for backend in (llama, hf):
        mot, _ = await backend.generate_from_context(turn, ctx, model_options=OPTS)
        await mot.avalue()
        outs.append((mot.meta["raw_text"], mot.usage))
        if backend is llama:
            assert mot.meta["cache_counts"].reused_tokens == 0  # the slot was cleared
    assert outs[0] == outs[1]


async def test_caveat_explicit_all_zero_lora_list_clears_an_alora_slot(llama):
    """Raw HTTP on a slot of our server: after an aLoRA request, a base request with the
    explicit all-zero list reuses nothing; the same request omitting ``lora`` reuses the
    base prefix (what the client relies on when the prompt diverges before the invocation)."""
    row, prompt = _check_row(
        llama, ChatContext().add(Message("user", "Hi.")).add(Message("assistant", "Hello.")),
        "The answer is short.")
    base = [*row[: prompt.shared], 300, 337]  # diverges right at the invocation
    url = llama.urls[0]
    slot = 3
    with httpx.Client(timeout=30, headers=_auth(llama)) as http:
        def post(prompt_ids, **extra):
            body = {"prompt": prompt_ids, "n_predict": 1, "temperature": 0, "id_slot": slot,
                    "cache_prompt": True, **extra}
            return http.post(url + "/completion", json=body).json()["timings"]

        alora = [{"id": 1, "scale": 1.0}]  # manifest order: lora first, then alora
        ids = {e["id"]: e for e in http.get(url + "/lora-adapters").json()}
        if not ids[1].get("alora_invocation_tokens"):
            alora = [{"id": 0, "scale": 1.0}]
        post(row, lora=alora)
        cleared = post(base, lora=[{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.0}])
        assert cleared["cache_n"] == 0
        post(row, lora=alora)
        kept = post(base)
        assert kept["cache_n"] >= prompt.shared - 1
    llama.fleet.servers[0].slots[slot].forget()  # we used it behind its back


async def test_omitted_lora_is_the_base_model_on_our_servers(llama, hf):
    """--lora-scaled FILE:0: omitting ``lora`` runs no adapter (with --lora-init-without-apply
    alone every adapter would run at scale 1)."""
    ids = hf.render(Message("user", "What is the capital of France?"), ChatContext())[0]
    with httpx.Client(timeout=30, headers=_auth(llama)) as http:
        reply = http.post(llama.urls[0] + "/completion", json={
            "prompt": ids, "n_predict": 1, "n_probs": 5, "temperature": 0, "id_slot": 2,
            "cache_prompt": False}).json()
    llama.fleet.servers[0].slots[2].forget()
    with torch.no_grad():
        ref = torch.log_softmax(hf.model(torch.tensor([ids])).logits[0, -1].float(), -1)
    for entry in reply["completion_probabilities"][0]["top_logprobs"]:
        assert abs(float(ref[entry["id"]].exp()) - float(torch.tensor(entry["logprob"]).exp())) \
            < 1e-4


async def test_each_react_turn_prefills_only_its_new_tokens(llama):
    from mellea_local.cli.demo import AGENT_GOALS
    from mellea_local.cli.react_cmd import build_tools
    from mellea_local.core.thunk import ModelOutputThunk
    from mellea_local.react import react

    goal, table = AGENT_GOALS[1]
    _, ctx = await react(goal, ChatContext(), llama, tools=build_tools(table), loop_budget=4,
                         model_options={ModelOption.MAX_NEW_TOKENS: 64})
    turns = [m for m in ctx.as_list() if isinstance(m, ModelOutputThunk)
             and "cache_counts" in m.meta]
    assert len(turns) >= 2
    for before, turn in itertools.pairwise(turns):
        counts = turn.meta["cache_counts"]
        # everything the previous turn read and wrote is reused (its last token, never fed
        # back, excepted); only the tool result and the new headers are prefilled
        assert counts.reused_tokens >= before.usage["total_tokens"] - 2, (counts, before.usage)
        assert counts.prefilled_tokens + counts.reused_tokens == turn.usage["prompt_tokens"]


async def test_the_unsampleable_bias_leaves_the_reported_probabilities_as_they_are(llama, hf):
    """``probabilities.unsampleable`` (the ``logit_bias`` every one-token read sends) acts in
    the sampler only: the whole-vocabulary logprobs are the same with and without it, banned
    tokens included. And it is needed: where the server's greedy pick is the lead byte of a
    multi-byte character, the reply has no probabilities (the rewrite LoRA of issue 31);
    with the bias it has them, unchanged."""
    from mellea_local.backends.llama_server.probabilities import unsampleable

    n_vocab = len(hf.tokenizer)
    banned = unsampleable(hf.tokenizer, n_vocab)
    assert banned and all(flag is False for _, flag in banned)
    ids = hf.render(Message("user", "Name a city in Japan."), ChatContext())[0]
    with httpx.Client(timeout=60, headers=_auth(llama)) as http:
        def read(bias):
            body = {"prompt": ids, "n_predict": 1, "n_probs": n_vocab, "temperature": 0,
                    "post_sampling_probs": False, "id_slot": 2, "cache_prompt": False}
            return http.post(llama.urls[0] + "/completion",
                             json={**body, "logit_bias": bias} if bias else body).json()

        plain, biased = read(None), read(banned)
        entries = plain["completion_probabilities"][0]["top_logprobs"]
        [lead, *_] = [e["id"] for e in entries if len(e["bytes"]) == 1
                      and 0xC2 <= e["bytes"][0] <= 0xF4]  # a lone lead byte
        assert [lead, False] in banned
        forced = read([[lead, 1e4]])  # the greedy pick is now that lead byte
        fixed = read([[lead, 1e4], *banned])
    llama.fleet.servers[0].slots[2].forget()  # we used it behind its back
    assert not forced.get("completion_probabilities")  # the server withholds them
    dense = [{e["id"]: e["logprob"] for e in r["completion_probabilities"][0]["top_logprobs"]}
             for r in (plain, biased, fixed)]
    assert len(dense[0]) == n_vocab
    assert dense[1] == dense[0] == dense[2]
