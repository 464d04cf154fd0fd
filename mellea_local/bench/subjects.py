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
    """A user/assistant conversation of about ``n_tokens`` tokens, ending with an answer.

    "About": counted from the turns' own tokens, not the chat template's, so the rendered
    conversation runs longer (345 tokens for 256 on the tiny template); ``fit_conversation``
    hits a length measured the way a check sees it.
    """
    rng = random.Random(seed)
    ctx = ChatContext().add(Message("system", "Answer briefly."))
    total = 0
    while True:
        question, answer = _turn(rng)
        ctx = ctx.add(Message("user", question)).add(Message("assistant", answer))
        total += len(tokenizer.encode(question + answer, add_special_tokens=False)) + 10
        if total >= n_tokens:
            return ctx


def _turn(rng: random.Random) -> tuple[str, str]:
    question = " ".join(rng.choice(WORDS) for _ in range(6)) + "?"
    answer = " ".join(rng.choice(WORDS) for _ in range(10)) + "."
    return question, answer


def _build(turns: list[tuple[str, str]]) -> ChatContext:
    ctx = ChatContext().add(Message("system", "Answer briefly."))
    for question, answer in turns:
        ctx = ctx.add(Message("user", question)).add(Message("assistant", answer))
    return ctx


FIT_TOLERANCE = 0.02
"""How far a fitted conversation may miss its length: 2 % (or 8 tokens, whichever is more)."""


def fit_tolerance(n_tokens: int) -> int:
    return max(8, round(FIT_TOLERANCE * n_tokens))


def fit_conversation(
    count: Any, n_tokens: int, seed: int = 0
) -> tuple[ChatContext, int]:
    """A conversation whose length, as ``count(ctx)`` measures it (the tokens a check's prompt
    shares with the conversation), is as close to ``n_tokens`` as whole words allow.

    Whole turns are added or dropped until the count brackets the length, then the last
    answer's words are trimmed (one word is one to a few tokens), keeping the closest. Returns
    the conversation and its measured count, which the caller reports next to the length asked.
    """
    rng = random.Random(seed)
    turns = [_turn(rng)]
    counted = count(_build(turns))
    while counted < n_tokens:
        step = max(1, (n_tokens - counted) // max(counted // len(turns), 1))
        turns += [_turn(rng) for _ in range(step)]
        counted = count(_build(turns))
    while len(turns) > 1:
        shorter = count(_build(turns[:-1]))
        if shorter < n_tokens:
            break
        turns.pop()
        counted = shorter
    best = (abs(counted - n_tokens), counted, list(turns))
    question, answer = turns[-1]
    q_words, a_words = question.rstrip("?").split(), answer.rstrip(".").split()
    # Shorter and shorter last turns: the answer first, then (its answer one word) the question.
    trials = [(len(q_words), a) for a in range(len(a_words) - 1, 0, -1)]
    trials += [(q, 1) for q in range(len(q_words) - 1, 0, -1)]
    for q, a in trials:
        last = (" ".join(q_words[:q]) + "?", " ".join(a_words[:a]) + ".")
        trial = [*turns[:-1], last]
        got = count(_build(trial))
        if abs(got - n_tokens) < best[0]:
            best = (abs(got - n_tokens), got, trial)
        if got < n_tokens:
            break
    return _build(best[2]), best[1]


def param_count(model: Any) -> int:
    """Parameters of ``model`` (its adapters included once PEFT has patched it in)."""
    return sum(p.numel() for p in model.parameters())


def real_model_folder(model: str) -> str:
    """Where ``--model`` loads from: a registered name (``smollm2-135m``) becomes its verified
    cached folder, a ``.gguf`` its conversion; a folder or hub id is returned as is."""
    from mellea_local.backends.loading import resolve_model_source

    return resolve_model_source(model)


def bare_pretrained(folder: str, *, dtype: torch.dtype = torch.float32,
                    device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """``(model, tokenizer)`` loaded by transformers alone, as a user of plain transformers
    would: the bare side of a comparison must owe nothing to this package."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, use_safetensors=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device).eval(), tokenizer
