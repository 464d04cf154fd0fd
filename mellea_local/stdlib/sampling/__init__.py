"""Mirrors the peer's ``mellea.stdlib.sampling``: the sampling strategies we provide."""

from mellea_local.sampling import (
    BaseSamplingStrategy,
    MultiTurnStrategy,
    RejectionSamplingStrategy,
    RepairTemplateStrategy,
    SamplingResult,
)

__all__ = [
    "BaseSamplingStrategy",
    "MultiTurnStrategy",
    "RejectionSamplingStrategy",
    "RepairTemplateStrategy",
    "SamplingResult",
]
