"""Instruct / validate / repair: sampling strategies and the ``instruct`` entry point."""

from mellea_local.sampling.instruct import DEFAULT_STRATEGY, ainstruct, instruct
from mellea_local.sampling.instruction import Instruction
from mellea_local.sampling.result import SamplingAttempt, SamplingResult
from mellea_local.sampling.strategies import (
    BaseSamplingStrategy,
    MultiTurnStrategy,
    RejectionSamplingStrategy,
    RepairTemplateStrategy,
    combine_requirements,
    failure_feedback,
)

__all__ = [
    "DEFAULT_STRATEGY",
    "BaseSamplingStrategy",
    "Instruction",
    "MultiTurnStrategy",
    "RejectionSamplingStrategy",
    "RepairTemplateStrategy",
    "SamplingAttempt",
    "SamplingResult",
    "ainstruct",
    "combine_requirements",
    "failure_feedback",
    "instruct",
]
