"""A saved tiny model folder and a random aLoRA folder for it: what a user passes the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from mellea_local.embedded import build_model, save
from mellea_local.embedded.random_adapter import save_random_adapter


@pytest.fixture(scope="session")
def cli_model(tiny_tokenizer, tmp_path_factory) -> tuple[Path, Path]:
    """(model folder, adapter folder): a random base and a random requirement-check aLoRA."""
    root = tmp_path_factory.mktemp("cli-model")
    base = build_model(tiny_tokenizer, seed=5)
    model_dir = save(base, tiny_tokenizer, root / "model")
    adapter_dir = save_random_adapter(base, tiny_tokenizer, root / "adapter", alora=True,
                                      seed=11)
    return model_dir, adapter_dir
