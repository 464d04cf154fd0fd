"""Mirrors the peer's ``mellea.backends.model_ids``: ``ModelIdentifier`` (the peer's named
constants for hosted models are not mapped: name a local folder, hub id or registered model)."""

from mellea_local.model_ids import ModelIdentifier

__all__ = ["ModelIdentifier"]
