"""Mirrors the peer's ``mellea.stdlib.requirements.requirement`` (the requirement classes)."""

from mellea_local.requirements import (
    ALoraRequirement,
    LLMaJRequirement,
    Requirement,
    check,
    req,
    reqify,
    requirement_check_to_bool,
    simple_validate,
)

__all__ = [
    "ALoraRequirement",
    "LLMaJRequirement",
    "Requirement",
    "check",
    "req",
    "reqify",
    "requirement_check_to_bool",
    "simple_validate",
]
