"""What the speed benchmarks measure: model shapes, conversations and requirements.

Speed figures come from random-init models (built offline in seconds by
``mellea_local.embedded``) with random adapters: a forward pass costs the same whatever the
weights hold, so the figures measure compute and our overhead, never answers, and any shape
(up to a Granite 3B one on a GPU) can be benchmarked without downloading anything.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from mellea_local.core.context import ChatContext
from mellea_local.embedded.corpus import REQUIREMENT_PHRASINGS
from mellea_local.errors import InvalidInputError
from mellea_local.messages import Message

SIZES: dict[str, dict[str, int]] = {  # name -> build_model kwargs
    # The tests' tiny model: what `bench --quick` runs, so a smoke run takes seconds.
    "tiny": {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2},
    "bench-20m": {"hidden_size": 512, "num_layers": 8, "num_heads": 8, "num_kv_heads": 4},
    "granite-3b-shape": {"hidden_size": 2560, "num_layers": 40, "num_heads": 40,
                         "num_kv_heads": 8, "intermediate_size": 8192},
}
"""Model shapes by name; ``granite-3b-shape`` is the GPU subject (Granite 3.x 2B/3B layout)."""

WORDS = ("the city of paris is large and old", "a number like 42 is small",
         "london has a river and many bridges", "we answer in short plain sentences",
         "tokyo is the capital of japan", "please reply with valid json")
REQUIREMENTS = [p.format(word="paris", n=8) for p in REQUIREMENT_PHRASINGS] + [
    "The response mentions london.", "The response is at most 3 words long."]
"""Eight distinct requirements (the batched modes check them all at once)."""


def size_names() -> list[str]:
    """The preset names, sorted (for ``--size`` choices)."""
    return sorted(SIZES)


def build_sized_model(
    tokenizer: Any, size: str, *, device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32, max_position: int = 8192, seed: int = 0,
) -> Any:
    """A random-init model of preset ``size``, in eval mode on ``device`` and in ``dtype``.

    Off the CPU the weights are created on the device itself: initialising a 3B model on the
    CPU first would take longer than the benchmark.
    """
    from mellea_local.embedded import build_model

    if size not in SIZES:
        raise InvalidInputError(
            f"Unknown model size {size!r}; use one of {', '.join(size_names())}."
        )
    device = torch.device(device)
    if device.type == "cpu":
        model = build_model(tokenizer, seed=seed, max_position=max_position, **SIZES[size])
    else:
        with device:
            model = build_model(tokenizer, seed=seed, max_position=max_position, **SIZES[size])
    return model.to(device=device, dtype=dtype)


def conversation(tokenizer: Any, n_tokens: int, seed: int = 0) -> ChatContext:
    """A user/assistant conversation of about ``n_tokens`` tokens, ending with an answer."""
    rng = random.Random(seed)
    ctx = ChatContext().add(Message("system", "Answer briefly."))
    total = 0
    while True:
        question = " ".join(rng.choice(WORDS) for _ in range(6)) + "?"
        answer = " ".join(rng.choice(WORDS) for _ in range(10)) + "."
        ctx = ctx.add(Message("user", question)).add(Message("assistant", answer))
        total += len(tokenizer.encode(question + answer, add_special_tokens=False)) + 10
        if total >= n_tokens:
            return ctx


def param_count(model: Any) -> int:
    """Parameters of ``model`` (its adapters included once PEFT has patched it in)."""
    return sum(p.numel() for p in model.parameters())
