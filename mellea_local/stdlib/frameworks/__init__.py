"""Mirrors the peer's ``mellea.stdlib.frameworks`` (problem-solving frameworks)."""
