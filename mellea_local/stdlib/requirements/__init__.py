"""Mirrors the peer's ``mellea.stdlib.requirements``: requirements and their shorthands."""

from mellea_local.requirements import (
    ALoraRequirement,
    LLMaJRequirement,
    PartialValidationResult,
    Requirement,
    ValidationResult,
    check,
    default_output_to_bool,
    req,
    reqify,
    requirement_check_to_bool,
    simple_validate,
)

__all__ = [
    "ALoraRequirement",
    "LLMaJRequirement",
    "PartialValidationResult",
    "Requirement",
    "ValidationResult",
    "check",
    "default_output_to_bool",
    "req",
    "reqify",
    "requirement_check_to_bool",
    "simple_validate",
]
