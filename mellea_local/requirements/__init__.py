"""Requirements and their validation (instruct / validate / repair's middle step)."""

from mellea_local.requirements.requirement import (
    ALoraRequirement,
    LLMaJRequirement,
    PartialValidationResult,
    Requirement,
    ValidationResult,
    check,
    default_output_to_bool,
    req,
    reqify,
    requirement_check_score,
    requirement_check_to_bool,
    simple_validate,
)
from mellea_local.requirements.validate import avalidate, validate

__all__ = [
    "ALoraRequirement",
    "LLMaJRequirement",
    "PartialValidationResult",
    "Requirement",
    "ValidationResult",
    "avalidate",
    "check",
    "default_output_to_bool",
    "req",
    "reqify",
    "requirement_check_score",
    "requirement_check_to_bool",
    "simple_validate",
    "validate",
]
