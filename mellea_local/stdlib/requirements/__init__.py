"""Mirrors the peer's ``mellea.stdlib.requirements``: requirements and their shorthands.

The names are ``mellea_local.requirements``' own ``__all__`` (one owner for the list).
"""

import mellea_local.requirements as _owner
from mellea_local.requirements import *  # noqa: F403 - the owner's __all__, re-exported

__all__: list[str] = []
__all__ += _owner.__all__
