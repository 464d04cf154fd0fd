"""The aLoRA training step's split forward (the conversation through the base without
autograd, the suffix through the adapter) equals PEFT's whole-sequence forward: same loss, same
gradients, on a real tokenizer, a real model and a real PEFT aLoRA, with left padding."""

from __future__ import annotations

import random

import pytest
import torch

from mellea_local.training.data import load_training_data
from mellea_local.training.loop import TrainConfig, _forward, _load_base, _loss
from mellea_local.training.rows import adapter_record, build_rows

LOSS_TOL = 1e-5  # fp32 on CPU: the two paths sum the same products in another order
GRAD_TOL = 1e-4  # relative to the largest gradient entry


@pytest.fixture(scope="module")
def setup(check_jsonl):
    from peft import LoraConfig, get_peft_model

    from mellea_local.intrinsics.scoring import category_tokens

    cfg = TrainConfig(data=str(check_jsonl), model="embedded", threads=1)
    model, tokenizer, _ = _load_base(cfg)
    adapter = adapter_record(tokenizer, "alora")
    data = load_training_data(check_jsonl, validation=0.0)
    rows = build_rows(tokenizer, adapter, data.train, max_length=1024)
    torch.manual_seed(0)
    peft_model = get_peft_model(model, LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj"],
        task_type="CAUSAL_LM", alora_invocation_tokens=list(adapter.invocation_tokens)))
    for name, p in peft_model.named_parameters():  # lora_B starts at 0: make the adapter act
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    return peft_model, tokenizer.pad_token_id, rows, category_tokens(tokenizer, adapter.fast_path)


def grads_of(model, rows, pad, table, split):
    model.zero_grad(set_to_none=True)
    loss = _loss(_forward(model, rows, pad, alora=True, split=split), rows, table)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()
                         if p.requires_grad}


@pytest.mark.parametrize("seed", [0, 1])
def test_split_forward_has_the_whole_sequence_loss_and_gradients(setup, seed):
    model, pad, rows, table = setup
    batch = random.Random(seed).sample(rows, 6)
    assert len({len(r.ids) for r in batch}) > 1  # left padding is exercised
    assert min(r.shared for r in batch) > 20  # there is a conversation to skip
    model.train()
    whole_loss, whole = grads_of(model, batch, pad, table, split=False)
    split_loss, split = grads_of(model, batch, pad, table, split=True)
    assert abs(whole_loss - split_loss) <= LOSS_TOL * max(1.0, abs(whole_loss))
    scale = max(g.abs().max().item() for g in whole.values())
    assert scale > 0
    for name, g in whole.items():
        assert (g - split[name]).abs().max().item() <= GRAD_TOL * scale, name
