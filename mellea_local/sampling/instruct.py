"""``instruct``: instruct, validate, repair in one call.

The description and the requirements become an ``Instruction``; a sampling strategy generates,
checks every requirement over the real conversation, and repairs until one sample passes or its
budget is spent. The whole run comes back as a ``SamplingResult``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mellea_local.core.backend import Backend
from mellea_local.core.context import Context
from mellea_local.core.sync import sync_twin
from mellea_local.errors import InputTypeError
from mellea_local.requirements import Requirement
from mellea_local.sampling.instruction import Instruction
from mellea_local.sampling.result import SamplingResult
from mellea_local.sampling.strategies import (
    BaseSamplingStrategy,
    RejectionSamplingStrategy,
    combine_requirements,
)

__all__ = ["DEFAULT_STRATEGY", "ainstruct", "instruct"]

# Strategies hold configuration only (no per-run state), so one default instance is safe.
DEFAULT_STRATEGY: BaseSamplingStrategy = RejectionSamplingStrategy(loop_budget=2)


async def ainstruct(
    description: str,
    context: Context,
    backend: Backend,
    *,
    requirements: Sequence[Requirement | str] | None = None,
    strategy: BaseSamplingStrategy | None = DEFAULT_STRATEGY,
    format: type[Any] | None = None,
    model_options: dict[str, Any] | None = None,
) -> SamplingResult:
    """Ask for ``description`` and sample until ``requirements`` hold.

    The strategy's own requirements come first, then ``requirements``; all of them are listed
    in the instruction (``check_only`` ones excepted) and checked. ``strategy=None`` generates
    once and still validates, so ``success`` is meaningful. ``format`` (a pydantic model)
    constrains every sample; ``model_options`` go to every generation.
    """
    if strategy is None:
        strategy = RejectionSamplingStrategy(loop_budget=1)
    if not isinstance(strategy, BaseSamplingStrategy):
        raise InputTypeError(
            f"strategy must be a sampling strategy (e.g. RejectionSamplingStrategy), got "
            f"{type(strategy).__name__}."
        )
    reqs = combine_requirements(strategy.requirements, requirements)
    instruction = Instruction(description, reqs)
    return await strategy.sample(
        instruction, context, backend, reqs, format=format, model_options=model_options
    )


instruct = sync_twin(ainstruct)
"""Synchronous ``ainstruct`` for code that has no event loop running (same signature)."""
