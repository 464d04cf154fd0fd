"""Concrete backends (``hf/``, ``llama_server/``) and what they share.

Also mirrors the peer's ``mellea.backends`` names we provide (``Backend``, ``ModelOption``,
``ModelIdentifier``, ``MelleaTool``, ``tool``), so ``from mellea_local.backends import
ModelOption`` ports a peer script unchanged; the backends themselves load torch on use.
"""

from mellea_local.core.backend import Backend
from mellea_local.model_ids import ModelIdentifier
from mellea_local.options import ModelOption
from mellea_local.tools import MelleaTool, tool

__all__ = ["Backend", "MelleaTool", "ModelIdentifier", "ModelOption", "tool"]
