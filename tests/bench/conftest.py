"""A tiny backend holding a random requirement-check aLoRA and LoRA, as a library serves them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mellea_local.embedded import build_model
from mellea_local.embedded.random_adapter import save_random_adapter

BASE_NAME = "tiny-bench"


@pytest.fixture(scope="session")
def bench_library(tiny_tokenizer, tmp_path_factory) -> Path:
    """<root>/requirement-check/tiny-bench/{alora,lora}/: random adapters for seed-5 base."""
    root = tmp_path_factory.mktemp("bench-adapters")
    base = build_model(tiny_tokenizer, seed=5)
    for kind, seed in (("alora", 21), ("lora", 22)):
        save_random_adapter(base, tiny_tokenizer, root / "requirement-check" / BASE_NAME / kind,
                            alora=kind == "alora", seed=seed)
    return root


@pytest.fixture()
def bench_backend(tiny_tokenizer, bench_library):
    """A fresh backend on the adapters' base with both adapters loaded (aLoRA serves)."""
    from mellea_local.backends.huggingface import LocalHFBackend

    backend = LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=5), tiny_tokenizer,
                                         model_id=BASE_NAME)
    root = bench_library / "requirement-check" / BASE_NAME
    backend.add_adapter(root / "alora", name="rc_alora")
    backend.add_adapter(root / "lora", name="rc_lora")
    return backend
