"""Fixtures for the embedded-model tests."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _script(name: str) -> ModuleType:
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.fixture(scope="session")
def train_script() -> ModuleType:
    """``scripts/train_embedded.py`` as a module: its helpers are tested on their own."""
    return _script("train_embedded")


@pytest.fixture(scope="session")
def probe_script() -> ModuleType:
    """``scripts/probe_lookup.py`` as a module."""
    return _script("probe_lookup")


@pytest.fixture(scope="session")
def eval_script() -> ModuleType:
    """``scripts/eval_embedded.py`` as a module."""
    return _script("eval_embedded")
