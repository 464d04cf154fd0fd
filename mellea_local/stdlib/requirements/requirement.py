"""Mirrors the peer's ``mellea.stdlib.requirements.requirement`` (the requirement classes).

The names are ``mellea_local.requirements.requirement``'s own ``__all__`` (one owner).
"""

from mellea_local.requirements import requirement as _owner
from mellea_local.requirements.requirement import *  # noqa: F403 - the owner's __all__

__all__: list[str] = []
__all__ += _owner.__all__
