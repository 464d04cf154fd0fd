"""The requirement-check intrinsic: does the last assistant turn satisfy a requirement?

Thin wrappers over the generic call (``mellea_local.intrinsics.call``): each requirement is one
call with ``requirement=<description>``, all of them one batch. The hot path, top to bottom:

1. Render the conversation plus the io.yaml instruction as a user turn; the aLoRA's invocation
   is located in token space (``AloraStrategy.build_prompt``).
2. Append the forced JSON prefix up to the value (``{"score": "``): its tokens are constant.
3. One forward pass with the adapter over what the base KV cache does not already hold (the
   check suffix), reading the next-token distribution: score = P(yes) / (P(yes) + P(no)).
4. ``nest`` -> ``{"requirement_check": {"score": p}}``; the score travels as a number.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mellea_local.adapters import Adapter, AdapterRunner, TokenPrompt
from mellea_local.core.context import Context
from mellea_local.errors import InputTypeError
from mellea_local.inputs import (
    check_backend,
    check_context,
    description_of,
    descriptions,
)
from mellea_local.inputs import descriptions as checked_descriptions
from mellea_local.intrinsics.call import aintrinsic_batch, as_runner, sync_twin
from mellea_local.intrinsics.intrinsic import REQUIREMENT_CHECK, Intrinsic
from mellea_local.intrinsics.prompt import build_prompts
from mellea_local.intrinsics.score import requirement_check_value
from mellea_local.options import check_options

INTRINSIC = REQUIREMENT_CHECK

CheckPrompt = TokenPrompt


def build_check_prompts(
    backend: AdapterRunner, ctx: Context, requirements: Sequence[str], adapter: Adapter
) -> list[TokenPrompt]:
    """Token ids of each check (conversation, instruction turn, generation prompt) and the
    length of the part shared with the base model (training and benchmarks use these)."""
    intrinsic = Intrinsic.for_adapter(adapter)
    return build_prompts(backend.tokenizer, intrinsic, adapter, ctx,
                         [{"requirement": r} for r in requirements])


async def check_results(
    backend: AdapterRunner,
    ctx: Context,
    requirements: Sequence[str],
    *,
    adapter: Adapter,
    model_options: Mapping[str, Any] | None = None,
    reuse: bool = True,
    fast: bool = True,
) -> list[Any]:
    """The intrinsic's result for each requirement, in order, as one batch.

    ``reuse`` and ``fast`` exist for benchmarks and exactness tests: turning them off gives
    the slow paths the fast one must agree with. ``requirements`` must be a list of
    non-blank descriptions (``InputTypeError`` / ``InvalidInputError`` otherwise, naming the
    item).
    """
    texts = descriptions(requirements)
    check_context(ctx, "ctx")
    return await aintrinsic_batch(
        backend, adapter.intrinsic or adapter.name, ctx,
        [{"requirement": r} for r in texts], adapter=adapter,
        model_options=model_options, reuse=reuse, fast=fast)


async def check_outputs(backend: AdapterRunner, ctx: Context, requirements: Sequence[str],
                        **kwargs: Any) -> list[str]:
    """``check_results`` (same arguments) as JSON text: the peer's ``score_requirements``
    contract."""
    return [json.dumps(r) for r in await check_results(backend, ctx, requirements, **kwargs)]


async def ascore_requirements(
    backend: AdapterRunner,
    ctx: Context,
    descriptions: Sequence[str],
    *,
    intrinsic_name: str = INTRINSIC,
    model_options: Mapping[str, Any] | None = None,
) -> list[str]:
    """What ``Backend.score_requirements`` returns for an adapter runner: per description,
    the intrinsic's output as JSON text, built from the numbers at this edge."""
    texts = checked_descriptions(descriptions, "descriptions")
    check_context(ctx, "ctx")
    check_options(model_options)
    chosen = as_runner(backend).adapter_for(intrinsic_name)
    return await check_outputs(backend, ctx, texts, adapter=chosen,
                               model_options=model_options)


class RequirementScoring:
    """``Backend.score_requirements`` for a backend that is an ``AdapterRunner``: mix it in
    before ``Backend`` (``class MyBackend(RequirementScoring, Backend)``), so every runner
    scores through the same intrinsic path instead of restating it (``ServingBackend`` does)."""

    score_requirements = ascore_requirements  # the method: ``self`` is the runner


async def arequirement_checks(
    context: Context,
    backend: AdapterRunner,
    requirements: Sequence[Any],
    model_options: dict[str, Any] | None = None,
    *,
    adapter: str | None = None,
) -> list[float]:
    """Scores in [0, 1] of the last assistant turn against each requirement (a ``str`` or a
    ``Requirement``), in one batch.

    ``requirements`` is a list (a plain str is refused: use ``arequirement_check`` for one);
    each item a non-blank str or a Requirement with a description.
    """
    texts = descriptions(requirements)
    check_context(context)
    check_backend(backend, needs="adapter_for")
    check_options(model_options)
    if adapter is not None and not isinstance(adapter, str):
        raise InputTypeError(
            f"adapter must be the name of a loaded adapter (str) or None, got "
            f"{type(adapter).__name__}."
        )
    chosen = as_runner(backend).adapter_for(INTRINSIC, name=adapter)
    results = await check_results(backend, context, texts, adapter=chosen,
                                  model_options=model_options)
    return [requirement_check_value(r, chosen.name) for r in results]


async def arequirement_check(
    context: Context,
    backend: AdapterRunner,
    requirement: Any,
    model_options: dict[str, Any] | None = None,
    *,
    adapter: str | None = None,
) -> float:
    """Score in [0, 1] that the last assistant turn satisfies ``requirement`` (> 0.5: met)."""
    description_of(requirement, "requirement")  # a list here gets its own error, not [list]
    return (await arequirement_checks(context, backend, [requirement], model_options,
                                      adapter=adapter))[0]


requirement_check = sync_twin(arequirement_check)
requirement_checks = sync_twin(arequirement_checks)


__all__ = [
    "INTRINSIC",
    "arequirement_check",
    "arequirement_checks",
    "ascore_requirements",
    "build_check_prompts",
    "check_outputs",
    "check_results",
    "requirement_check",
    "requirement_check_value",
    "requirement_checks",
]
