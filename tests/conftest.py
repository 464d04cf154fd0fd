"""Shared test set-up: offline hub, GPU marker, and the tiny-model fixtures.

Fixtures that build models live here (and only here) so every test uses the same objects.
"""

from __future__ import annotations

import os

# Before transformers/huggingface_hub are imported anywhere: a missing model must fail at
# once instead of retrying the hub for ~45 s.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis times each example (200 ms deadline) and fails a test whose example ran slow once:
# on a loaded CI machine (other jobs, OpenMP threads) that is noise, not a finding. The profile
# keeps every property and example count, and only drops the wall-clock checks.
settings.register_profile(
    "loaded-ci", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "loaded-ci"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch is a hard dependency
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# --- The tiny embedded model family (mellea_local.embedded) ------------------------------------
# Session-scoped and SHARED by every test: never mutate these objects (no training, no
# PeftModel.from_pretrained / get_peft_model on `tiny_model`, which patch the base in place).
# Build a private copy with `mellea_local.embedded.build_model(tiny_tokenizer, ...)` or load one
# from `tiny_model_dir` instead.


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """The embedded family's tokenizer (chat and response templates included)."""
    from mellea_local.embedded import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer):
    """A random-init Llama (hidden 64, 2 layers, seed 0) in eval mode, on the CPU."""
    from mellea_local.embedded import build_model

    return build_model(tiny_tokenizer, hidden_size=64, num_layers=2)


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model, tiny_tokenizer, tmp_path_factory):
    """A folder holding `tiny_model` and `tiny_tokenizer` as `from_pretrained` reads them."""
    from mellea_local.embedded import save

    return save(tiny_model, tiny_tokenizer, tmp_path_factory.mktemp("tiny-llama"))


# --- Fresh backends on the shipped model (tests that try to damage a backend) ------------------


@pytest.fixture()
def bare_backend():
    """The shipped ``mellea-tiny-chat`` with no adapter loaded (PEFT has not touched it)."""
    import torch
    from adapter_folders import WEIGHTS

    from mellea_local.backends.huggingface import LocalHFBackend

    return LocalHFBackend(WEIGHTS, device="cpu", dtype=torch.float32)


@pytest.fixture()
def embedded_backend():
    """A fresh ``LocalHFBackend.embedded()``: the shipped model and both trained adapters."""
    from mellea_local.backends.huggingface import LocalHFBackend

    return LocalHFBackend.embedded()


@pytest.fixture(scope="session")
def shared_embedded_backend():
    """The shipped trained model with its two requirement-check adapters, loaded once.

    SHARED: tests may generate and check with it, but must not add or remove adapters or change
    its options; a test that damages a backend uses the fresh ``embedded_backend``.
    """
    from mellea_local.backends.huggingface import LocalHFBackend

    return LocalHFBackend.embedded()
