"""Mirrors the peer's ``mellea.backends.model_options``: the ``ModelOption`` keys."""

from mellea_local.options import ModelOption

__all__ = ["ModelOption"]
