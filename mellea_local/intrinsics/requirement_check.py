"""The requirement-check intrinsic: does the last assistant turn satisfy a requirement?

The hot path, top to bottom:

1. Render the conversation plus the io.yaml instruction as a user turn, then splice the aLoRA's
   invocation tokens in *token space* where the instruction names them (BPE may otherwise merge
   the published ``<requirements>:`` into tokens that never spell the invocation).
2. Append the forced JSON prefix up to the value (``{"score": "``): its tokens are constant.
3. One forward pass with the adapter over what the base KV cache does not already hold (the
   check suffix), reading the next-token distribution: score = P(yes) / (P(yes) + P(no)).
4. ``nest`` -> ``{"requirement_check": {"score": p}}``, parsed by ``requirement_check_score``.

io.yaml files whose rules are not one ``likelihood`` over one enum field take the general path:
constrained greedy generation from the same prompt, top-k logprobs, then the rules.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from mellea_local.adapters import Adapter, AdapterRunner, TokenPrompt, apply_transformations
from mellea_local.core.context import Context
from mellea_local.errors import IntrinsicOutputError
from mellea_local.rendering import to_chat_messages, to_message_dicts
from mellea_local.requirements.requirement import Requirement, requirement_check_score

INTRINSIC = "requirement-check"
TOP_K = 10


CheckPrompt = TokenPrompt


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def build_check_prompts(
    backend: AdapterRunner, ctx: Context, requirements: Sequence[str], adapter: Adapter
) -> list[TokenPrompt]:
    """Token ids of each check: conversation, instruction turn, generation prompt.

    ``shared`` is the length of the conversation part every check has in common (up to the
    invocation for an aLoRA): the part the base KV cache may serve.
    """
    view = ctx.view_for_generation()
    if not view:
        raise ValueError(
            "A requirement check judges the last assistant turn of a conversation, but the "
            f"context's view is empty ({type(ctx).__name__}); pass a ChatContext holding the "
            "conversation and the output to check."
        )
    messages = to_chat_messages(view)
    if messages[-1].role != "assistant":
        raise ValueError(
            "A requirement check judges the last assistant turn, but the context ends with a "
            f"{messages[-1].role!r} turn; add the model's output to the context first."
        )
    history = to_message_dicts(messages)
    tokenizer = backend.tokenizer
    before = tokenizer.apply_chat_template(history, add_generation_prompt=False, tokenize=False)

    def encode(text: str) -> list[int]:
        return _encode(tokenizer, text)

    prompts = []
    for requirement in requirements:
        turn = {"role": "user", "content": adapter.io_config.render_instruction(
            requirement=requirement)}
        text = tokenizer.apply_chat_template(
            [*history, turn], add_generation_prompt=True, tokenize=False)
        prompts.append(adapter.strategy.build_prompt(
            adapter, encode, text, _turn_start(before, text, turn["content"])))
    return prompts


def _turn_start(before: str, text: str, instruction: str) -> int:
    """Where the intrinsic's turn starts in ``text``: the end of the rendered conversation
    when ``text`` extends it (the usual case), else the start of the instruction."""
    common = 0
    for a, b in zip(before, text, strict=False):
        if a != b:
            break
        common += 1
    at = text.rfind(instruction)
    return common if 0 <= common <= at or at < 0 else at


class _CategoryTokens:
    """For one adapter and tokenizer: the forced value prefix and each category's tokens."""

    def __init__(self, backend: AdapterRunner, adapter: Adapter) -> None:
        spec = adapter.fast_path
        assert spec is not None
        tokenizer = backend.tokenizer
        self.forced = _encode(tokenizer, spec.json_prefix)
        # The fast path is only exact if every category continues the forced tokens as they
        # are: then the value starts at a token boundary, as in constrained generation.
        self.canonical = all(
            _encode(tokenizer, spec.json_prefix + c)[: len(self.forced)] == self.forced
            for c in spec.categories
        )
        pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        ids: dict[str, list[int]] = {c: [] for c in spec.categories}
        for token_id, piece in enumerate(pieces):
            category = spec.likelihood.category_for_token(piece, in_string=True)
            if category in ids:
                ids[category].append(token_id)
        self.ids = {c: torch.tensor(v, dtype=torch.long) for c, v in ids.items()}


# Built once per (tokenizer, adapter): scanning a 100k vocabulary takes about a second.
_TABLES: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], _CategoryTokens]] = (
    weakref.WeakKeyDictionary())
_TABLES_LOCK = threading.Lock()


def _category_tokens(backend: AdapterRunner, adapter: Adapter) -> _CategoryTokens:
    key = (adapter.name, str(adapter.path))
    with _TABLES_LOCK:
        tables = _TABLES.setdefault(backend.tokenizer, {})
        if key not in tables:
            tables[key] = _CategoryTokens(backend, adapter)
        return tables[key]


def uses_fast_path(backend: AdapterRunner, adapter: Adapter) -> bool:
    return adapter.fast_path is not None and _category_tokens(backend, adapter).canonical


async def _fast(
    backend: AdapterRunner, adapter: Adapter, prompts: list[CheckPrompt], *, reuse: bool
) -> list[Any]:
    spec = adapter.fast_path
    assert spec is not None
    table = _category_tokens(backend, adapter)
    rows = [p.ids + table.forced for p in prompts]
    shared = min(p.shared for p in prompts)
    logprobs = await backend.next_token_logprobs(adapter, rows, shared, reuse=reuse)
    probs = torch.exp(logprobs)
    results = []
    for row in probs:
        mass = {c: float(row[idx.to(row.device)].sum()) for c, idx in table.ids.items()}
        results.append(spec.result_from_probs(mass, name=adapter.intrinsic or adapter.name))
    return results


async def _general(
    backend: AdapterRunner, adapter: Adapter, prompt: CheckPrompt, *, reuse: bool,
    max_new_tokens: int | None = None,
) -> Any:
    io = adapter.io_config
    budget = max_new_tokens or int(io.parameters.get("max_completion_tokens", 16))
    tokens = await backend.generate_with_adapter(
        adapter, prompt.ids, prompt.shared, json_schema=io.response_format_dict(),
        max_new_tokens=budget, top_logprobs=TOP_K, reuse=reuse)
    text = "".join(t.token for t in tokens)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise IntrinsicOutputError(
            f"Adapter {adapter.name!r} did not return JSON ({text!r}); raise "
            "max_completion_tokens in its io.yaml or check that it fits this base model."
        ) from exc
    return apply_transformations(io.transformations, parsed, logprobs=tokens,
                                 name=adapter.intrinsic or adapter.name)


async def check_outputs(
    backend: AdapterRunner,
    ctx: Context,
    requirements: Sequence[str],
    *,
    adapter: Adapter,
    reuse: bool = True,
    fast: bool = True,
) -> list[str]:
    """The intrinsic's JSON output for each requirement, in order (one batch when possible).

    ``reuse`` and ``fast`` exist for benchmarks and exactness tests: turning them off gives
    the slow paths the fast one must agree with.
    """
    if not requirements:
        return []
    prompts = build_check_prompts(backend, ctx, requirements, adapter)
    if fast and uses_fast_path(backend, adapter):
        results = await _fast(backend, adapter, prompts, reuse=reuse)
    else:
        results = [await _general(backend, adapter, p, reuse=reuse) for p in prompts]
    return [json.dumps(r) for r in results]


def _description(requirement: str | Requirement) -> str:
    if isinstance(requirement, Requirement):
        if not requirement.description:
            raise ValueError("A requirement checked by an adapter needs a description.")
        return requirement.description
    return requirement


async def arequirement_checks(
    context: Context,
    backend: AdapterRunner,
    requirements: Sequence[str | Requirement],
    model_options: dict[str, Any] | None = None,
    *,
    adapter: str | None = None,
) -> list[float]:
    """Scores in [0, 1] of the last assistant turn against each requirement, in one batch."""
    chosen = backend.adapter_for(INTRINSIC, name=adapter)
    outputs = await check_outputs(backend, context, [_description(r) for r in requirements],
                                  adapter=chosen)
    return [requirement_check_score(o) for o in outputs]


async def arequirement_check(
    context: Context,
    backend: AdapterRunner,
    requirement: str | Requirement,
    model_options: dict[str, Any] | None = None,
    *,
    adapter: str | None = None,
) -> float:
    """Score in [0, 1] that the last assistant turn satisfies ``requirement`` (> 0.5: met)."""
    return (await arequirement_checks(context, backend, [requirement], model_options,
                                      adapter=adapter))[0]


def _run(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError(
        "This is the synchronous form; inside a running event loop, await the a-prefixed "
        "twin (arequirement_check / arequirement_checks)."
    )


def requirement_check(
    context: Context,
    backend: AdapterRunner,
    requirement: str | Requirement,
    model_options: dict[str, Any] | None = None,
    *,
    adapter: str | None = None,
) -> float:
    """Synchronous ``arequirement_check``."""
    return _run(arequirement_check(context, backend, requirement, model_options,
                                   adapter=adapter))


def requirement_checks(
    context: Context,
    backend: AdapterRunner,
    requirements: Sequence[str | Requirement],
    model_options: dict[str, Any] | None = None,
    *,
    adapter: str | None = None,
) -> list[float]:
    """Synchronous ``arequirement_checks``."""
    return _run(arequirement_checks(context, backend, requirements, model_options,
                                    adapter=adapter))


__all__ = [
    "INTRINSIC",
    "arequirement_check",
    "arequirement_checks",
    "build_check_prompts",
    "check_outputs",
    "requirement_check",
    "requirement_checks",
]
