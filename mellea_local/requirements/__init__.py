"""Requirements and their validation (instruct / validate / repair's middle step).

The surface is ``requirement.py``'s ``__all__`` (its one owner) plus the validation entry points.
"""

from mellea_local.requirements import requirement as _requirement
from mellea_local.requirements.requirement import *  # noqa: F403 - its __all__, re-exported
from mellea_local.requirements.validate import avalidate, validate

__all__ = ["avalidate", "validate"]
__all__ += _requirement.__all__
