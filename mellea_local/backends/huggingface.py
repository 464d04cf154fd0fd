"""Old import path of ``LocalHFBackend``, kept for users: it lives in ``backends/hf/``."""

from mellea_local.backends.hf import LocalHFBackend

__all__ = ["LocalHFBackend"]
