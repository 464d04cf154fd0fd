"""Mirrors the peer's ``mellea.stdlib.context``: contexts and compactors.

The compactors are the ``compactor`` mirror's names (one list, kept there).
"""

from mellea_local.core import CBlock, ChatContext, Component, Context, ContextTurn, SimpleContext
from mellea_local.stdlib.context import compactor as _compactor
from mellea_local.stdlib.context.compactor import *  # noqa: F403 - that mirror's __all__

__all__ = ["CBlock", "ChatContext", "Component", "Context", "ContextTurn", "SimpleContext"]
__all__ += _compactor.__all__
