"""Intrinsics: adapter-backed judgements with a fixed output contract (requirement-check)."""

from mellea_local.intrinsics.requirement_check import (
    arequirement_check,
    arequirement_checks,
    requirement_check,
    requirement_checks,
)

__all__ = ["arequirement_check", "arequirement_checks", "requirement_check", "requirement_checks"]
