"""Real adapter folders to break: copies of the shipped adapters with one thing altered.

``copy_adapter`` copies a trained adapter from ``adapters/`` with its config, tensors or
io.yaml changed; ``probe`` and ``module_tree`` read the state a failed load must not change.
The fresh backends these tests damage are fixtures in ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import mellea_local.embedded as embedded_package
from mellea_local.adapters import default_library_roots, find_in_library

WEIGHTS = Path(embedded_package.__file__).parent / "weights" / "mellea-tiny-chat"
PROMPT = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What is 3 + 4?"},
]


def shipped_adapter(kind: str) -> Path:
    found = find_in_library("requirement-check", WEIGHTS, roots=default_library_roots(),
                            kinds=(kind,))
    assert found is not None
    return found.path


def copy_adapter(
    dst: Path, *, kind: str = "lora",
    config: Callable[[dict[str, Any]], Any] | None = None,
    tensors: Callable[[dict[str, torch.Tensor]], Any] | None = None,
    io_yaml: str | None = None,
) -> Path:
    """A copy of a shipped adapter at ``dst`` with its config/tensors/io.yaml changed in place."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(shipped_adapter(kind), dst)
    if config is not None:
        data = json.loads((dst / "adapter_config.json").read_text())
        config(data)
        (dst / "adapter_config.json").write_text(json.dumps(data))
    if tensors is not None:
        state = load_file(dst / "adapter_model.safetensors")
        tensors(state)
        save_file({k: v.contiguous() for k, v in state.items()},
                  dst / "adapter_model.safetensors", metadata={"format": "pt"})
    if io_yaml is not None:
        (dst / "io.yaml").write_text(io_yaml)
    return dst


def probe(backend: Any) -> torch.Tensor:
    """The base model's logits on a fixed prompt, through the backend's own base-call check."""
    ids = backend.tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True,
                                                tokenize=True, return_dict=True)["input_ids"]
    with backend.engine.holder.lock, torch.no_grad():
        backend.engine.holder.assert_base()
        return backend.model(torch.tensor([ids])).logits.clone()


def module_tree(model: Any) -> list[tuple[str, int]]:
    """Every module by name and identity: equal trees mean no layer was added or replaced."""
    return [(name, id(m)) for name, m in model.named_modules()]


