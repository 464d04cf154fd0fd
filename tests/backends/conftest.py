"""Fixtures and helpers shared by the KV cache tests: a tiny Llama, plain-text ids, forwards."""

from __future__ import annotations

import pytest
import torch
from kv_helpers import TEXT


@pytest.fixture(scope="module")
def model(tiny_model):
    return tiny_model


@pytest.fixture(scope="module")
def vocab(tiny_model) -> int:
    return tiny_model.config.vocab_size


@pytest.fixture(scope="module")
def ids(tiny_tokenizer) -> torch.Tensor:
    """48 ids of plain text: no control tokens, so only a fed suffix can activate the aLoRA."""
    encoded = tiny_tokenizer(TEXT, add_special_tokens=False, return_tensors="pt").input_ids[0]
    assert encoded.numel() >= 48
    return encoded[:48]


@pytest.fixture(scope="module")
def bench(tiny_tokenizer):
    """A backend on a random tiny model with a random aLoRA and LoRA (``CheckBench``)."""
    from mellea_local.bench.requirement_check import open_check_bench
    from mellea_local.bench.subjects import build_sized_model

    b = open_check_bench(build_sized_model(tiny_tokenizer, "tiny", seed=3), tiny_tokenizer)
    yield b
    b.close()
