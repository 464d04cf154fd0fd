"""Real PEFT adapters (random, untrained) for the tiny model, laid out as an adapter library."""

from __future__ import annotations

from pathlib import Path

import pytest

from mellea_local.embedded import build_model
from mellea_local.embedded.random_adapter import save_random_adapter

BASE_NAME = "tiny-llama"
BASE_SEED = 5


def make_adapter(tokenizer, out: Path, *, alora: bool, seed: int, io_yaml: str | None = None,
                 hidden_size: int = 64) -> Path:
    """A random adapter folder for the tiny base (or a differently sized one)."""
    base = build_model(tokenizer, seed=BASE_SEED, hidden_size=hidden_size)
    return save_random_adapter(base, tokenizer, out, alora=alora, seed=seed, io_yaml=io_yaml)


@pytest.fixture(scope="session")
def adapter_library(tiny_tokenizer, tmp_path_factory) -> Path:
    """<root>/requirement-check/tiny-llama/{alora,lora}/ with io.yaml."""
    root = tmp_path_factory.mktemp("adapters")
    for kind, seed in (("alora", 11), ("lora", 12)):
        make_adapter(tiny_tokenizer, root / "requirement-check" / BASE_NAME / kind,
                     alora=kind == "alora", seed=seed)
    return root


@pytest.fixture()
def check_backend(tiny_tokenizer, adapter_library):
    """A fresh backend on the adapters' base model, both adapters loaded."""
    from mellea_local.backends.huggingface import LocalHFBackend

    backend = LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=BASE_SEED),
                                         tiny_tokenizer, model_id=BASE_NAME)
    backend.add_adapter("requirement-check", roots=[adapter_library])
    backend.add_adapter(adapter_library / "requirement-check" / BASE_NAME / "lora")
    return backend
