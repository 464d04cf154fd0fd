"""The requirement-check intrinsic on a real tiny model with real (random) PEFT adapters.

Each exactness claim is checked against the slow path it replaces: KV reuse against a full
prefill, the one-forward fast path against constrained generation, batches against singles.
"""

from __future__ import annotations

import pytest
import torch

from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext, SimpleContext
from mellea_local.errors import (
    AdapterError,
    AdapterSchemaMismatchError,
    AloraActivationError,
)
from mellea_local.intrinsics.requirement_check import (
    arequirement_check,
    arequirement_checks,
    build_check_prompts,
    check_outputs,
    requirement_check,
)
from mellea_local.messages import Message
from mellea_local.requirements import ALoraRequirement, Requirement, avalidate
from mellea_local.requirements.requirement import requirement_check_score

from .conftest import BASE_NAME, make_adapter

TOL = 1e-4
REQS = ["The response mentions paris.", "The response is valid JSON.",
        "The response is at most 5 words long."]


async def _conversation(backend, turns: int = 1, new_tokens: int = 16) -> ChatContext:
    """A real generated conversation (the base cache then holds it)."""
    ctx = ChatContext().add(Message("system", "Answer briefly."))
    for i in range(turns):
        mot, ctx = await backend.generate_from_context(
            Message("user", f"Question number {i}: what is the capital of France?"), ctx,
            model_options={"max_new_tokens": new_tokens,
                           "bad_words_ids": [[t] for t in backend.tokenizer.all_special_ids]})
        await mot.avalue()
    return ctx


def _scores(outputs: list[str]) -> list[float]:
    return [requirement_check_score(o) for o in outputs]


# ----- registration ------------------------------------------------------------------------


def test_intrinsic_name_prefers_the_alora_and_both_load_side_by_side(check_backend):
    adapters = check_backend.adapters
    assert set(adapters) == {"requirement-check_alora", "requirement-check_lora"}
    assert adapters["requirement-check_alora"].is_alora
    assert not adapters["requirement-check_lora"].is_alora
    assert check_backend.adapter_for("requirement-check").is_alora
    assert check_backend.supports_intrinsic("requirement-check")


def test_adding_a_loaded_folder_again_returns_it(check_backend, adapter_library):
    loaded = check_backend.adapters["requirement-check_alora"]
    folder = adapter_library / "requirement-check" / BASE_NAME / "alora"
    assert check_backend.add_adapter(folder) is loaded
    assert check_backend.add_adapter("requirement-check", roots=[adapter_library]) is loaded
    assert set(check_backend.adapters) == {"requirement-check_alora", "requirement-check_lora"}


def test_name_collision_names_what_was_passed(check_backend, adapter_library, tmp_path):
    import shutil

    other = tmp_path / "requirement-check" / BASE_NAME / "alora"
    shutil.copytree(adapter_library / "requirement-check" / BASE_NAME / "alora", other)
    with pytest.raises(AdapterError, match=r"add_adapter\('requirement-check'\).*name="):
        check_backend.add_adapter("requirement-check", roots=[tmp_path])


def test_adapter_for_another_base_is_refused(check_backend, tiny_tokenizer, tmp_path):
    wrong = make_adapter(tiny_tokenizer, tmp_path / "wide", alora=True, seed=3, hidden_size=32)
    with pytest.raises(AdapterError, match="different base model size"):
        check_backend.add_adapter(wrong, name="wide")
    assert "wide" not in check_backend.adapters


def test_adapter_for_another_tokenizer_is_refused(check_backend, tiny_tokenizer, tmp_path):
    import json

    path = make_adapter(tiny_tokenizer, tmp_path / "alien", alora=True, seed=3)
    config = json.loads((path / "adapter_config.json").read_text())
    config["alora_invocation_tokens"] = [len(tiny_tokenizer) + 5, 7]
    (path / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(AdapterError, match="another tokenizer"):
        check_backend.add_adapter(path, name="alien")


# ----- exactness ---------------------------------------------------------------------------


async def test_kv_reuse_equals_from_scratch(check_backend, tiny_tokenizer):
    ctx = await _conversation(check_backend, turns=2)
    alora = check_backend.adapter_for("requirement-check")
    reused = _scores(await check_outputs(check_backend, ctx, REQS, adapter=alora))
    assert check_backend.stats.last.reused_tokens > 0
    scratch = _scores(await check_outputs(check_backend, ctx, REQS, adapter=alora, reuse=False))
    assert check_backend.stats.last.reused_tokens == 0
    # And against a backend that never caches anything.
    fresh = LocalHFBackend.from_loaded(check_backend.model, tiny_tokenizer, model_id=BASE_NAME,
                                       kv_cache_tokens=0)
    fresh.engine.holder = check_backend.engine.holder
    cold = _scores(await check_outputs(fresh, ctx, REQS, adapter=alora))
    for a, b, c in zip(reused, scratch, cold, strict=True):
        assert abs(a - b) <= TOL and abs(a - c) <= TOL


async def test_fast_path_equals_constrained_generation(check_backend):
    ctx = await _conversation(check_backend)
    alora = check_backend.adapter_for("requirement-check")
    fast = _scores(await check_outputs(check_backend, ctx, REQS, adapter=alora))
    general = _scores(await check_outputs(check_backend, ctx, REQS, adapter=alora, fast=False))
    for a, b in zip(fast, general, strict=True):
        assert abs(a - b) <= TOL


@pytest.mark.parametrize(("adapter", "reuse"), [
    ("requirement-check_alora", True), ("requirement-check_alora", False),
    ("requirement-check_lora", False)])
async def test_batched_checks_equal_single_checks(check_backend, adapter, reuse):
    ctx = await _conversation(check_backend)
    chosen = check_backend.adapters[adapter]
    batch = _scores(await check_outputs(check_backend, ctx, REQS, adapter=chosen, reuse=reuse))
    singles = [_scores(await check_outputs(check_backend, ctx, [r], adapter=chosen,
                                           reuse=reuse))[0] for r in REQS]
    for a, b in zip(batch, singles, strict=True):
        assert abs(a - b) <= TOL
    assert len(set(round(s, 6) for s in batch)) > 1  # different requirements, different scores


async def test_batch_prefills_the_conversation_once(check_backend):
    ctx = await _conversation(check_backend)
    check_backend.prefix_cache.clear()
    alora = check_backend.adapter_for("requirement-check")
    await check_outputs(check_backend, ctx, REQS, adapter=alora)
    prompts = build_check_prompts(check_backend, ctx, REQS, alora)
    suffixes = sum(len(p.ids) - p.shared + 4 for p in prompts)
    assert check_backend.stats.last.prefilled_tokens == prompts[0].shared + suffixes


async def test_adapter_changes_the_score(check_backend):
    ctx = await _conversation(check_backend)
    alora = check_backend.adapter_for("requirement-check")
    [prompt] = build_check_prompts(check_backend, ctx, REQS[:1], alora)
    forced = check_backend.tokenizer.encode('{"score": "', add_special_tokens=False)
    ids = torch.tensor([prompt.ids + forced])
    with check_backend.engine.holder.lock, torch.no_grad():
        check_backend.engine.holder.assert_base()
        base_logits = check_backend.model(input_ids=ids).logits[0, -1]
    tok = check_backend.tokenizer
    yes, no = (tok.encode(w, add_special_tokens=False)[0] for w in ("yes", "no"))
    p = torch.softmax(base_logits, -1)
    base_score = float(p[yes] / (p[yes] + p[no]))
    score = await arequirement_check(ctx, check_backend, REQS[0])
    assert abs(score - base_score) > 1e-3


# ----- the compute floor -------------------------------------------------------------------


async def test_prefill_per_check_is_the_suffix_whatever_the_context_length(check_backend):
    prefilled, reused = [], []
    for turns in (1, 4):
        check_backend.prefix_cache.clear()
        ctx = await _conversation(check_backend, turns=turns)
        await arequirement_check(ctx, check_backend, REQS[0])  # reaches the floor from here on
        await arequirement_check(ctx, check_backend, REQS[0])
        prefilled.append(check_backend.stats.last.prefilled_tokens)
        reused.append(check_backend.stats.last.reused_tokens)
    assert prefilled[0] == prefilled[1]
    assert reused[1] > reused[0] + 40
    alora = check_backend.adapter_for("requirement-check")
    [prompt] = build_check_prompts(check_backend, ctx, REQS[:1], alora)
    assert prefilled[1] == len(prompt.ids) - prompt.shared + 4  # suffix + `{"score": "`


async def test_cache_stays_base_only_after_a_check(check_backend):
    ctx = await _conversation(check_backend)
    await arequirement_checks(ctx, check_backend, REQS)
    from mellea_local.backends.cache_compat import output_cache

    entries = check_backend.prefix_cache.entries()  # the generation's branch and the check's
    assert entries
    for entry in entries:
        ids = torch.tensor([list(entry.token_ids)])
        with check_backend.engine.holder.lock, torch.no_grad():
            check_backend.engine.holder.assert_base()
            fresh = check_backend.model(input_ids=ids, use_cache=True)
        expected = output_cache(fresh)
        for got, want in zip(entry.cache.layers, expected.layers, strict=True):
            assert torch.allclose(got.keys, want.keys, atol=1e-5)
            assert torch.allclose(got.values, want.values, atol=1e-5)


async def test_plain_lora_neither_reuses_nor_touches_the_cache(check_backend):
    ctx = await _conversation(check_backend)
    before = [(e.token_ids, id(e.cache)) for e in check_backend.prefix_cache.entries()]
    await arequirement_check(ctx, check_backend, REQS[0], adapter="requirement-check_lora")
    assert check_backend.stats.last.reused_tokens == 0
    after = [(e.token_ids, id(e.cache)) for e in check_backend.prefix_cache.entries()]
    assert before == after


# ----- failures ----------------------------------------------------------------------------


async def test_missing_invocation_raises_and_leaves_no_adapter_active(
    check_backend, tiny_tokenizer, tmp_path
):
    io = (tmp_path / "src.yaml")
    from mellea_local.adapters import REQUIREMENT_CHECK_IO_YAML

    io.write_text(REQUIREMENT_CHECK_IO_YAML.read_text().replace("<requirements>:", "Rule:"))
    path = make_adapter(tiny_tokenizer, tmp_path / "noinv", alora=True, seed=4,
                        io_yaml=io.read_text())
    check_backend.add_adapter(path, name="noinv")
    ctx = await _conversation(check_backend)
    with pytest.raises(AloraActivationError, match="invocation"):
        await arequirement_check(ctx, check_backend, REQS[0], adapter="noinv")
    check_backend.engine.holder.assert_base()


async def test_invocation_is_spliced_in_token_space(check_backend, tiny_tokenizer):
    # Granite's BPE merges the published "<requirements>:" into tokens that never spell the
    # declared run. Reproduce that with a tokenizer that knows ">:" as one token.
    import copy
    from types import SimpleNamespace

    from mellea_local.adapters import find_run

    merging = copy.deepcopy(tiny_tokenizer)
    merging.add_tokens([">:"])
    adapter = check_backend.adapter_for("requirement-check")
    inv = list(adapter.invocation_tokens)
    ctx = ChatContext().add(Message("user", "Hi")).add(Message("assistant", "Hello"))
    [prompt] = build_check_prompts(SimpleNamespace(tokenizer=merging), ctx, REQS[:1], adapter)
    naive = merging.encode(merging.decode(prompt.ids), add_special_tokens=False)
    assert find_run(naive, inv) < 0  # the trap: text tokenization loses the invocation
    assert find_run(prompt.ids, inv) == prompt.shared  # token space keeps it, where expected
    assert merging.decode(prompt.ids) == merging.decode(naive)  # and the text is unchanged


async def test_adapter_is_inactive_after_an_exception(check_backend, monkeypatch):
    ctx = await _conversation(check_backend)
    # The transformers model under PEFT: a check's forward reaches it through PEFT's forward
    # or directly (ModelHolder.forward), with the adapter's layers on either way.
    model = check_backend.engine.model

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(model, "forward", boom)
    with pytest.raises(RuntimeError, match="boom"):
        await arequirement_check(ctx, check_backend, REQS[0])
    monkeypatch.undo()
    assert check_backend.engine.holder.active_adapter is None
    check_backend.engine.holder.assert_base()
    # The backend still works, with the same answer as before.
    again = await arequirement_check(ctx, check_backend, REQS[0])
    assert 0.0 <= again <= 1.0


async def test_malformed_adapter_output_raises_the_schema_error(
    check_backend, tiny_tokenizer, tmp_path
):
    from mellea_local.adapters import REQUIREMENT_CHECK_IO_YAML

    text = REQUIREMENT_CHECK_IO_YAML.read_text().replace("field_name: requirement_check",
                                                         "field_name: verdict")
    path = make_adapter(tiny_tokenizer, tmp_path / "drift", alora=True, seed=4, io_yaml=text)
    check_backend.add_adapter(path, name="drift")
    ctx = await _conversation(check_backend)
    with pytest.raises(AdapterSchemaMismatchError):
        await arequirement_check(ctx, check_backend, REQS[0], adapter="drift")


async def test_an_empty_context_is_refused(check_backend):
    with pytest.raises(ValueError, match="empty"):
        await arequirement_check(SimpleContext(), check_backend, REQS[0])


def test_sync_twin_works_outside_an_event_loop(check_backend):
    ctx = ChatContext().add(Message("user", "Hi")).add(Message("assistant", "HELLO THERE"))
    score = requirement_check(ctx, check_backend, "The response is written in all capital letters.")
    assert 0.0 <= score <= 1.0


# ----- validation routes through the adapter ----------------------------------------------


async def test_plain_and_alora_requirements_validate_through_the_adapter(check_backend):
    ctx = await _conversation(check_backend)
    results = await avalidate([Requirement(REQS[0]), ALoraRequirement(REQS[1])], ctx,
                              check_backend)
    expected = await arequirement_checks(ctx, check_backend, REQS[:2])
    for result, score in zip(results, expected, strict=True):
        assert abs(result.score - score) <= TOL
        assert bool(result) == (score > 0.5)
