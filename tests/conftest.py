"""Shared test set-up: offline hub, GPU marker, and the tiny-model fixtures.

Fixtures that build models live here (and only here) so every test uses the same objects.
"""

from __future__ import annotations

import os

# Before transformers/huggingface_hub are imported anywhere: a missing model must fail at
# once instead of retrying the hub for ~45 s.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402


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
