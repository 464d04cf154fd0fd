"""Training rows built by the inference code path, so training and inference cannot drift.

The prompt of each example comes from ``intrinsics.prompt.build_prompts``, the function every
check calls, given an ``Adapter`` record of the adapter being trained: the conversation
rendered by the base model's chat template, the io.yaml instruction as a user turn, the
generation prompt, and (for an aLoRA) the invocation located in token space by the adapter
kind's own strategy. Appended: the forced JSON prefix the fast path feeds (``{"score": "``)
and the answer the adapter must give (``yes"}`` or ``no"}`` and EOS).

The aLoRA's invocation is the instruction's literal opening, before its first ``{variable}``
and without the trailing punctuation BPE would merge into it (``<requirements>`` for the
requirement-check io.yaml); ``build_prompts`` then proves it occurs in the rendered intrinsic
turn, or refuses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mellea_local.adapters import (
    REQUIREMENT_CHECK_IO_YAML,
    Adapter,
    AdapterKind,
    IOConfig,
    strategy_for,
)
from mellea_local.core.backend import REQUIREMENT_CHECK
from mellea_local.errors import TrainingDataError, TrainingError
from mellea_local.intrinsics.intrinsic import Intrinsic
from mellea_local.intrinsics.prompt import build_prompts, encode
from mellea_local.messages import chat_context
from mellea_local.training.data import Example


@dataclass(frozen=True)
class Row:
    ids: list[int]  # prompt + forced JSON prefix + answer (+ EOS)
    answer: int  # how many trailing ids are the answer the loss trains
    shared: int  # where the adapter starts acting (an aLoRA's invocation; 0 for a LoRA)
    label: str  # the category answered
    line: int
    origin: str = "user"  # the user's data or the replayed general data (reported apart)
    family: str | None = None  # the line's "family" field, when it has one


def invocation_text(io: IOConfig) -> str:
    """The instruction's fixed opening: ``<requirements>: {requirement}`` -> ``<requirements>``
    (a leading ``<tag>``, else the text before the first ``{``)."""
    instruction = io.instruction or ""
    tag = re.match(r"\s*(<[^<>\s{}]+>)", instruction)
    head = tag.group(1) if tag else instruction.split("{", 1)[0]
    text = head.rstrip(" \t\n:;,.-")
    if not text:
        raise TrainingError(
            f"The io.yaml instruction {instruction[:60]!r} starts with a variable, so it has no "
            "fixed text to invoke an aLoRA with; start it with a marker such as "
            "'<requirements>: ', or train a LoRA (--kind lora).")
    return text


def adapter_record(tokenizer: Any, kind: str, io_path: Path = REQUIREMENT_CHECK_IO_YAML,
                   intrinsic: str = REQUIREMENT_CHECK) -> Adapter:
    """The ``Adapter`` the prompt code needs, for an adapter not trained yet."""
    io = IOConfig.load(io_path)
    io.check_supported()
    adapter_kind = AdapterKind(kind)
    # The kind decides: an aLoRA is told its invocation, a LoRA (every token) gets None.
    told = strategy_for(adapter_kind).engine_invocation(encode(tokenizer, invocation_text(io)))
    return Adapter.build(
        name=f"{intrinsic}_{kind}", kind=adapter_kind, path=io_path.parent, io_config=io,
        invocation_tokens=tuple(told) if told is not None else None, intrinsic=intrinsic,
        tokenizer=tokenizer)


def answer_ids(tokenizer: Any, adapter: Adapter) -> tuple[list[int], dict[str, list[int]]]:
    """The forced prefix and each category's answer ids (value, closing ``"}``, EOS)."""
    spec = adapter.fast_path
    if spec is None or len(spec.categories) != 2:
        raise TrainingError(
            f"{adapter.io_config.source}: training needs an io.yaml scored by a likelihood "
            "over two categories (as requirement-check's yes/no); this one has none.")
    forced = encode(tokenizer, spec.json_prefix)
    answers: dict[str, list[int]] = {}
    for value in spec.categories:
        full = encode(tokenizer, spec.json_prefix + value + '"}')
        if full[: len(forced)] != forced:
            raise TrainingError(f"{spec.json_prefix!r} does not end at a token boundary with "
                                "this tokenizer; the forced prefix would not match training.")
        answers[value] = [*full[len(forced):], tokenizer.eos_token_id]
    return forced, answers


def build_rows(tokenizer: Any, adapter: Adapter, examples: list[Example], *,
               max_length: int) -> list[Row]:
    """One row per example; every example that does not fit ``max_length`` is listed."""
    forced, answers = answer_ids(tokenizer, adapter)
    intrinsic = Intrinsic.for_adapter(adapter)
    rows, long = [], []
    for ex in examples:
        prompt = build_prompts(tokenizer, intrinsic, adapter, chat_context(ex.messages),
                               [dict(ex.variables)])[0]
        ids = [*prompt.ids, *forced, *answers[ex.label]]
        if len(ids) > max_length:
            long.append(f"line {ex.line}: {len(ids)} tokens")
        shared = adapter.strategy.base_cache_prefix(prompt.shared)
        rows.append(Row(ids, len(answers[ex.label]), shared, ex.label, ex.line,
                        ex.origin, ex.family))
    if long:
        raise TrainingDataError(
            f"{len(long)} example(s) exceed --max-length {max_length} tokens (prompt, "
            "instruction and answer); shorten them or raise --max-length:\n"
            + "\n".join(long[:20]))
    return rows
