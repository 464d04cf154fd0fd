"""The name mapping the compatibility harness runs the peer's tests through."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import peer_shim
import pytest

import mellea_local

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import peer_compat


@pytest.fixture
def shim():
    peer_shim.install()
    try:
        yield
    finally:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, peer_shim.PeerFinder)]
        for name in [n for n in sys.modules if n == "mellea" or n.startswith("mellea.")]:
            del sys.modules[name]


def test_peer_names_resolve_to_our_objects_and_missing_ones_fail_on_use(shim):
    core = importlib.import_module("mellea.core")
    chat = importlib.import_module("mellea.stdlib.components.chat")
    assert core.CBlock is mellea_local.CBlock and chat.Message is mellea_local.Message
    assert importlib.import_module("mellea.stdlib.session").start_session is (
        mellea_local.start_session)
    assert "Span" in core.__all__  # the mapped module's public names
    missing = importlib.import_module("mellea.helpers").NoSuchHelper
    with pytest.raises(AttributeError, match=r"no counterpart of mellea\.helpers\.NoSuchHelper"):
        missing()
    # A lower-case name with no counterpart is taken for a submodule (`from x import base`).
    assert importlib.import_module("mellea.core").base.__name__ == "mellea.core.base"


def test_summary_counts_and_flags_unexplained_failures():
    node = "stdlib/test_x.py::test_a"
    cases = [
        {"node": node, "file": "stdlib/test_x.py", "status": "failed", "message": "boom"},
        {"node": "stdlib/test_x.py::test_b", "file": "stdlib/test_x.py", "status": "passed",
         "message": ""},
    ]
    result = peer_compat.summarise(cases)
    assert (result["passed"], result["failed"], result["pass_rate"]) == (1, 1, 50.0)
    assert result["unexplained"] == [node]
    explained = dict(peer_compat.DELIBERATE)
    first = next(iter(explained))
    cases[0]["node"] = first
    assert peer_compat.summarise(cases)["unexplained"] == []
