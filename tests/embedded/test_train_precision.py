"""``train_embedded.train_precision``: bfloat16 matmuls for a training stage (``Config.bf16``).

Real tiny Llamas from ``mellea_local.embedded``, real optimiser steps of the training script.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch

from mellea_local.embedded import build_model


@pytest.fixture(scope="module")
def fresh_model(tiny_tokenizer):
    """A private random-init model (hidden 64, 2 layers): tests train copies of it."""
    return build_model(tiny_tokenizer, hidden_size=64, num_layers=2)


def _copy_losses(script, model, tok, *, bf16: bool, steps: int = 12) -> list[float]:
    """Losses of ``steps`` copy-batch optimiser steps run inside one training stage."""
    model = copy.deepcopy(model).train()
    opt = script.base_optimizer(model, script.Config())
    rng, seps = random.Random(2), script.copy_separators(tok)
    losses = []
    with script.train_precision(model, bf16):
        for step in range(steps):
            script.set_lr(opt, 2e-3 * min(1.0, (step + 1) / 4))
            losses.append(script.lm_step(model, opt, script.copy_rows(rng, 16, len(tok), seps),
                                         tok.pad_token_id))
    return losses


def test_a_bf16_stage_trains_as_float32_does(train_script, fresh_model, tiny_tokenizer):
    """Every step of a bfloat16 stage sees the weights the previous step wrote: autocast
    keeps a cache of casted weights for as long as its region is open, and with it a stage
    kept training its first weights (loss flat while float32's fell)."""
    f32 = _copy_losses(train_script, fresh_model, tiny_tokenizer, bf16=False)
    b16 = _copy_losses(train_script, fresh_model, tiny_tokenizer, bf16=True)
    assert f32[-1] < f32[0] - 0.01  # the float32 reference does learn in 12 steps
    # bfloat16 rounds each matmul's inputs (8-bit mantissa): the same trajectory within 0.01
    assert max(abs(a - b) for a, b in zip(f32, b16, strict=True)) < 0.01
    assert b16[-1] < b16[0] - 0.01


def test_a_bf16_stage_leaves_the_model_as_it_found_it(train_script, fresh_model):
    model = copy.deepcopy(fresh_model)
    before = model.config._attn_implementation
    with train_script.train_precision(model, True):
        assert torch.is_autocast_enabled("cpu")
        assert model.config._attn_implementation == "eager"  # SDPA's bf16 backward is slow
    assert model.config._attn_implementation == before
    assert not torch.is_autocast_enabled("cpu")
    with pytest.raises(RuntimeError, match="inside"), train_script.train_precision(model, True):
        raise RuntimeError("a failure inside the stage")
    assert model.config._attn_implementation == before
    assert not torch.is_autocast_enabled("cpu")


def test_evaluations_inside_a_bf16_stage_run_in_float32(train_script, fresh_model,
                                                         tiny_tokenizer):
    """The self-check logged while the base trains reads the model as inference does."""
    model = copy.deepcopy(fresh_model).eval()
    seen: list[bool] = []
    model.register_forward_pre_hook(lambda *_: seen.append(torch.is_autocast_enabled("cpu")))
    outside = train_script.base_self_check(model, tiny_tokenizer, n_per_family=2)
    with train_script.train_precision(model, True):
        inside = train_script.base_self_check(model, tiny_tokenizer, n_per_family=2)
        model(input_ids=torch.tensor([[5, 6, 7]]))  # while a stage trains: bfloat16
    assert inside == outside
    assert seen == [False] * 24 + [True]  # 12 questions each time, then the training forward


def test_native_bf16_is_read_from_the_cpu_flags(train_script):
    """The default recipe trains in bfloat16; a CPU without the instructions emulates it,
    slower than float32, and the script warns before a 70-minute run (flags as Linux lists
    them: x86 ``flags`` and Arm ``Features`` lines)."""
    zen4 = "flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
    skylake = "flags\t\t: fpu avx2 avx512f avx512bw avx512_vnni\n"
    graviton3 = "Features\t: fp asimd sve bf16 i8mm\n"
    assert train_script.native_bf16(zen4) and train_script.native_bf16(graviton3)
    assert not train_script.native_bf16(skylake)
