"""Mirrors the peer's ``mellea.stdlib.session``: ``start_session`` and ``MelleaSession``."""

from mellea_local.session import MelleaSession, start_session

__all__ = ["MelleaSession", "start_session"]
