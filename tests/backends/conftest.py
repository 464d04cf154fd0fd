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
