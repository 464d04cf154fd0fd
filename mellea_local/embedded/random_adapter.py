"""Random (untrained) PEFT adapters for a base model: test fixtures and benchmark subjects.

A random adapter exercises every mechanism a trained one does (loading, activation, KV reuse,
batching, scoring) and costs nothing to make, so tests and benchmarks can run on any model
shape. ``init_lora_weights=False`` draws B != 0, so the adapter visibly changes outputs.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from mellea_local.adapters import REQUIREMENT_CHECK_IO_YAML

ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
INVOCATION_TEXT = "<requirements>"


def save_random_adapter(
    base: Any,
    tokenizer: Any,
    out: str | Path,
    *,
    alora: bool,
    seed: int = 0,
    rank: int = 8,
    target_modules: tuple[str, ...] = ATTENTION_MODULES,
    io_yaml: str | None = None,
    invocation: list[int] | None = None,
    scale: float = 1.0,
) -> Path:
    """Write an adapter folder (config, safetensors weights, io.yaml) for ``base``.

    ``base`` is copied first: PEFT injects its layers into the model it is given. An aLoRA is
    invoked by ``<requirements>``, the start of the requirement-check instruction, unless
    ``invocation`` (token ids) says otherwise (an agent aLoRA: the assistant header).
    ``scale`` multiplies every B matrix: a small one makes an adapter that changes the
    logits a little, so a model's valid output stays valid under it.
    """
    from peft import LoraConfig, get_peft_model

    out = Path(out)
    if invocation is None:
        invocation = tokenizer.encode(INVOCATION_TEXT, add_special_tokens=False)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=list(target_modules),
        task_type="CAUSAL_LM",
        init_lora_weights=False,
        alora_invocation_tokens=invocation if alora else None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft_model = get_peft_model(copy.deepcopy(base), config)
    if scale != 1.0:
        with torch.no_grad():
            for name, param in peft_model.named_parameters():
                if "lora_B" in name:
                    param.mul_(scale)
    peft_model.save_pretrained(out)
    (out / "io.yaml").write_text(io_yaml or REQUIREMENT_CHECK_IO_YAML.read_text())
    return out
