"""The rules every engine keeps, one suite over every registered engine (``conftest.ENGINES``).

ARCHITECTURE.md's "rules a runner keeps" are these tests: an io.yaml asking for what is not
applied is refused at admission; an aLoRA whose invocation is absent is refused, never run as
the base; reusing cached K/V equals computing from scratch; the one-forward fast path equals
constrained decoding; a batch equals its calls one by one; no adapter stays on after a call;
log-probabilities are float32 (``-inf`` where the engine reports a token impossible); bad
input is a typed error that leaves the backend usable. The fake engine runs the suite for the
shared layer only; the HF and llama-server engines are the proof.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch
from adapter_folders import copy_adapter, shipped_adapter

from mellea_local.bench.accuracy import context_of
from mellea_local.embedded import synthetic as S
from mellea_local.errors import (
    AdapterError,
    AdapterNotFoundError,
    AloraActivationError,
    InputTypeError,
    IOConfigError,
    PromptTooLongError,
)
from mellea_local.intrinsics.call import aintrinsic_batch
from mellea_local.options import ModelOption

INTRINSIC = "requirement-check"
TOLERANCE = {"hf": 1e-4, "llama-server": 2e-3, "fake": 1e-5}
"""Equal within: PEFT against itself; llama.cpp's f32 arithmetic (test_llama_scores); exact."""


def _example(i: int = 0) -> S.CheckExample:
    return S.check_examples(random.Random(40_000 + i), 1, families=S.FAMILIES)[0]


def _ctx_and_calls(n: int = 1) -> tuple[Any, list[dict[str, str]]]:
    ex = _example()
    others = [_example(i + 1).requirement for i in range(n - 1)]
    return context_of(ex.messages), [{"requirement": r} for r in [ex.requirement, *others]]


def _score(result: Any) -> float:
    return float(result["requirement_check"]["score"])


async def _greedy_base(backend: Any) -> str:
    from mellea_local.core.blocks import CBlock

    ex = _example(7)
    mot, _ = await backend.generate_from_context(
        CBlock("Answer in one word."), context_of(ex.messages[:-1]),
        model_options={ModelOption.TEMPERATURE: 0.0, ModelOption.MAX_NEW_TOKENS: 6})
    return str(await mot.avalue())


def _unsupported_copy(tmp_path: Path) -> Path:
    text = (shipped_adapter("alora") / "io.yaml").read_text()
    assert "  temperature: 0.0" in text
    return copy_adapter(tmp_path / "requirement-check-top-p", kind="alora",
                        io_yaml=text.replace("  temperature: 0.0",
                                             "  temperature: 0.0\n  top_p: 0.9"))


def test_unsupported_io_yaml_is_refused_at_admission(engine, tmp_path):
    _name, backend = engine
    before = backend.adapters
    with pytest.raises(IOConfigError, match="top_p"):
        backend.add_adapter(_unsupported_copy(tmp_path), name="top-p")
    assert backend.adapters == before  # nothing half-admitted
    assert "top-p" not in getattr(backend.engine, "lora_ids", {})


async def test_activation_is_refused_without_the_invocation(engine):
    name, backend = engine
    alora = backend.adapter_for(INTRINSIC, name="requirement-check_alora")
    ids = backend.tokenizer.encode("no invocation here at all", add_special_tokens=False)
    ctx, calls = _ctx_and_calls()
    [before] = await aintrinsic_batch(backend, INTRINSIC, ctx, calls)
    with pytest.raises(AloraActivationError):
        await backend.next_token_logprobs(alora, [ids], len(ids) - 1)
    [after] = await aintrinsic_batch(backend, INTRINSIC, ctx, calls)  # still usable
    assert abs(_score(before) - _score(after)) <= TOLERANCE[name]


@pytest.mark.parametrize("adapter", ["requirement-check_alora", "requirement-check_lora"])
async def test_reuse_equals_scratch(engine, adapter):
    name, backend = engine
    ctx, calls = _ctx_and_calls()
    scratch = await aintrinsic_batch(backend, INTRINSIC, ctx, calls, adapter=adapter,
                                     reuse=False)
    cold = await aintrinsic_batch(backend, INTRINSIC, ctx, calls, adapter=adapter)
    warm = await aintrinsic_batch(backend, INTRINSIC, ctx, calls, adapter=adapter)
    for got in (cold, warm):
        assert abs(_score(got[0]) - _score(scratch[0])) <= TOLERANCE[name]


@pytest.mark.parametrize("adapter", ["requirement-check_alora", "requirement-check_lora"])
async def test_fast_path_equals_constrained_decoding(engine, adapter):
    name, backend = engine
    ctx, calls = _ctx_and_calls()
    [fast] = await aintrinsic_batch(backend, INTRINSIC, ctx, calls, adapter=adapter)
    [slow] = await aintrinsic_batch(backend, INTRINSIC, ctx, calls, adapter=adapter, fast=False)
    assert abs(_score(fast) - _score(slow)) <= TOLERANCE[name]


async def test_a_batch_equals_its_calls_one_by_one(engine):
    name, backend = engine
    ctx, calls = _ctx_and_calls(3)
    batch = await aintrinsic_batch(backend, INTRINSIC, ctx, calls)
    singles = [(await aintrinsic_batch(backend, INTRINSIC, ctx, [c]))[0] for c in calls]
    assert len(batch) == 3
    for b, s in zip(batch, singles, strict=True):
        assert abs(_score(b) - _score(s)) <= TOLERANCE[name]


async def test_no_adapter_is_left_active(engine):
    """A base generation after checks (one of them refused half way) equals one before."""
    _name, backend = engine
    before = await _greedy_base(backend)
    ctx, calls = _ctx_and_calls(2)
    await aintrinsic_batch(backend, INTRINSIC, ctx, calls)
    await aintrinsic_batch(backend, INTRINSIC, ctx, calls, adapter="requirement-check_lora")
    alora = backend.adapter_for(INTRINSIC)
    with pytest.raises(AloraActivationError):
        await backend.next_token_logprobs(alora, [[1, 2, 3]], 2)
    assert await _greedy_base(backend) == before
    holder = getattr(backend.engine, "holder", None)
    if holder is not None:  # the HF engine can also be asked directly
        assert holder.active_adapter is None
    if hasattr(backend.engine, "active"):  # so can the fake
        assert backend.engine.active is None


async def test_logprobs_are_float32_and_minus_inf_where_impossible(engine):
    name, backend = engine
    from mellea_local.intrinsics.intrinsic import Intrinsic
    from mellea_local.intrinsics.options import scoring_options
    from mellea_local.intrinsics.prompt import build_prompts
    from mellea_local.intrinsics.scoring import category_tokens

    adapter = backend.adapter_for(INTRINSIC)
    intrinsic = Intrinsic.for_adapter(adapter)
    ctx, calls = _ctx_and_calls(2)
    prompts = build_prompts(backend.tokenizer, intrinsic, adapter, ctx, calls,
                            scoring_options(None, backend.tokenizer.chat_template))
    table = category_tokens(backend.tokenizer, intrinsic.fast_path)
    rows = [p.ids + table.forced for p in prompts]
    out = await backend.next_token_logprobs(adapter, rows, min(p.shared for p in prompts),
                                            read=table.read)
    assert out.dtype == torch.float32 and out.shape[0] == 2
    assert out.shape[1] >= len(backend.tokenizer)
    assert not bool(torch.isnan(out).any()) and not bool((out == float("inf")).any())
    assert bool((out <= 0).all())
    total = torch.logsumexp(out, dim=-1)
    assert bool((total <= 1e-4).all())  # never more than all of the mass
    assert bool(torch.isfinite(out[:, table.read]).any(dim=-1).all())  # what is read is there
    if name == "llama-server":  # a top-n reply: the tokens not reported are -inf
        assert bool(torch.isinf(out).any())
    # constrained decoding: a token the grammar forbids is never an alternative
    [prompt] = prompts[:1]
    tokens = await backend.generate_with_adapter(
        adapter, prompt.ids, prompt.shared, json_schema=intrinsic.config.response_format_dict(),
        max_new_tokens=12, top_logprobs=5)
    assert "".join(t.token for t in tokens).startswith('{"score": "')
    for t in tokens:
        assert t.logprob <= 0 and all(lp > float("-inf") for _, lp in t.top_logprobs)


async def test_bad_input_is_a_typed_error_and_the_backend_stays_usable(engine, tmp_path):
    _name, backend = engine
    before = backend.adapters
    with pytest.raises(AdapterNotFoundError):
        backend.adapter_for("no-such-intrinsic")
    with pytest.raises(AdapterNotFoundError):
        backend.unload_adapter("no-such-adapter")
    with pytest.raises(AdapterError):
        backend.add_adapter(shipped_adapter("lora"), name="bad.name")
    with pytest.raises(AdapterNotFoundError):
        backend.add_adapter(tmp_path / "missing")
    ctx, calls = _ctx_and_calls()
    with pytest.raises(InputTypeError):
        await aintrinsic_batch(backend, 3, ctx, calls)  # type: ignore[arg-type]
    alora = backend.adapter_for(INTRINSIC)
    inv = list(alora.invocation_tokens)
    too_long = [backend.tokenizer.eos_token_id] * 9_000 + inv
    with pytest.raises(PromptTooLongError):
        await backend.next_token_logprobs(alora, [too_long], len(too_long) - len(inv))
    assert backend.adapters == before
    [result] = await aintrinsic_batch(backend, INTRINSIC, ctx, calls)
    assert 0.0 <= _score(result) <= 1.0
