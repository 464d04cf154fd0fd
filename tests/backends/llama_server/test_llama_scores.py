"""Requirement-check scores on llama-server equal LocalHFBackend's (PEFT) on the embedded
model: both adapters, all six families, the fast path and the general (generation) path."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import needs_server

from mellea_local.bench.accuracy import context_of
from mellea_local.embedded import synthetic as S
from mellea_local.intrinsics.call import aintrinsic_batch
from mellea_local.intrinsics.intrinsic import Intrinsic
from mellea_local.intrinsics.options import scoring_options
from mellea_local.intrinsics.prompt import build_prompts
from mellea_local.intrinsics.scoring import category_tokens

pytestmark = needs_server

TOLERANCE = 2e-3
ADAPTERS = ("requirement-check_alora", "requirement-check_lora")


def _examples() -> list[S.CheckExample]:
    return S.check_examples(random.Random(9_100), 2, families=S.FAMILIES)


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_scores_equal_peft_on_all_six_families(llama, hf, adapter):
    examples = _examples()
    assert {e.family for e in examples} == set(S.FAMILIES)
    worst = 0.0
    for ex in examples:
        ctx = context_of(ex.messages)
        calls = [{"requirement": ex.requirement}]
        [mine] = await aintrinsic_batch(llama, "requirement-check", ctx, calls, adapter=adapter)
        [ref] = await aintrinsic_batch(hf, "requirement-check", ctx, calls, adapter=adapter)
        a, b = mine["requirement_check"]["score"], ref["requirement_check"]["score"]
        worst = max(worst, abs(a - b))
        assert abs(a - b) <= TOLERANCE, (ex.family, ex.requirement, a, b)
    assert worst < TOLERANCE


async def test_batched_checks_of_one_conversation_equal_peft(llama, hf):
    ex = _examples()[0]
    ctx = context_of(ex.messages)
    calls = [{"requirement": S.requirement_for(f, **S.check_example(
        random.Random(i), f, True).slots)} for i, f in enumerate(S.FAMILIES)]
    mine = await aintrinsic_batch(llama, "requirement-check", ctx, calls)
    ref = await aintrinsic_batch(hf, "requirement-check", ctx, calls)
    for m, r in zip(mine, ref, strict=True):
        assert abs(m["requirement_check"]["score"] - r["requirement_check"]["score"]) <= TOLERANCE


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_general_path_equals_peft_and_the_fast_path(llama, hf, adapter):
    """Constrained greedy generation stepped on the server: same JSON, same score."""
    for ex in _examples()[:3]:
        ctx = context_of(ex.messages)
        calls = [{"requirement": ex.requirement}]
        [slow] = await aintrinsic_batch(llama, "requirement-check", ctx, calls,
                                        adapter=adapter, fast=False)
        [ref] = await aintrinsic_batch(hf, "requirement-check", ctx, calls, adapter=adapter,
                                       fast=False)
        [fast] = await aintrinsic_batch(llama, "requirement-check", ctx, calls, adapter=adapter)
        s = slow["requirement_check"]["score"]
        assert abs(s - ref["requirement_check"]["score"]) <= TOLERANCE
        assert abs(s - fast["requirement_check"]["score"]) <= TOLERANCE


async def test_next_token_logprobs_are_raw_probabilities_not_post_sampling(llama, hf):
    """n_probs with post_sampling_probs=false: the softmax of the raw logits, whatever the
    sampler would keep (top-k 40 / min-p defaults would cut the tail off)."""
    ex = _examples()[1]
    adapter = llama.adapter_for("requirement-check")
    intrinsic = Intrinsic.for_adapter(adapter)
    options = scoring_options(None, llama.tokenizer.chat_template)
    [prompt] = build_prompts(llama.tokenizer, intrinsic, adapter, context_of(ex.messages),
                             [{"requirement": ex.requirement}], options)
    table = category_tokens(llama.tokenizer, intrinsic.fast_path)
    row = prompt.ids + table.forced
    mine = (await llama.next_token_logprobs(adapter, [row], prompt.shared, read=table.read))[0]
    ref = (await hf.next_token_logprobs(hf.adapter_for("requirement-check"), [row],
                                        prompt.shared, reuse=False))[0]
    finite = torch.isfinite(mine)
    assert int(finite.sum()) == 256  # n_probs; the rest is -inf
    assert float((mine[finite].exp() - ref[finite].exp()).abs().max()) < 1e-4
    # the mass it reads is essentially all of it: nothing was cut off by a sampler
    assert float(mine[finite].exp().sum()) > 0.999
