"""Real llama-server processes on the embedded model, exported to GGUF in a temp folder.

Without the binary every server test skips with one line saying how to get it; the export and
routing tests need only the ``gguf`` package.
"""

from __future__ import annotations

import importlib.util

import pytest
from real_model_selection import deselect_real_model_tests, report_deselected

HOW = ("scripts/install_llamacpp.sh .venv/bin/pip constraints.txt (a bounded, portable build; "
       "or `make dev`)")
_MISSING = [m for m in ("httpx", "gguf") if importlib.util.find_spec(m) is None]
if _MISSING:  # nothing here can even be imported: leave the folder out, say why once
    collect_ignore_glob = ["test_*.py"]


def pytest_report_header(config):
    if _MISSING:
        return f"llama-server tests not collected ({', '.join(_MISSING)} missing): {HOW}"
    return None


def _binary():
    if _MISSING:
        return None
    from mellea_local.backends.llama_server.launch import find_binary
    from mellea_local.errors import LlamaServerBinaryError

    try:
        return find_binary()
    except LlamaServerBinaryError:
        return None


BINARY = _binary()
needs_server = pytest.mark.llama_server
_LEFT_OUT: list[str] = []


def pytest_collection_modifyitems(config, items):
    """Without the binary the server tests are left out, with one line saying how to get it
    (a skip per test would print a line per test). ``real_model`` tests also need
    SmolLM2-135M-Instruct in the model cache (``real_model_selection``)."""
    deselect_real_model_tests(config, items)
    if BINARY is not None:
        return
    out = [i for i in items if i.get_closest_marker("llama_server")]
    if out:
        _LEFT_OUT.extend(i.nodeid for i in out)
        config.hook.pytest_deselected(items=out)
        items[:] = [i for i in items if not i.get_closest_marker("llama_server")]


def pytest_terminal_summary(terminalreporter):
    report_deselected(terminalreporter)
    if _LEFT_OUT:
        terminalreporter.write_line(
            f"SKIPPED {len(_LEFT_OUT)} llama-server tests: no llama-server binary: {HOW}")


@pytest.fixture(scope="session")
def server_binary():
    return BINARY


@pytest.fixture(scope="session")
def gguf_dir(tmp_path_factory):
    """The embedded model and its adapter library, exported once."""
    from mellea_local.backends.llama_server.gguf_export import export_gguf

    out = tmp_path_factory.mktemp("gguf")
    export_gguf("embedded", out)
    return out


@pytest.fixture(scope="session")
def llama(server_binary, gguf_dir):
    """One server, four slots, shared by the tests that do not kill or reconfigure it."""
    from mellea_local.backends.llama_server import LlamaServerBackend

    with LlamaServerBackend.launch(gguf_dir, servers=1, threads=1, slots=4, ctx=2048) as backend:
        yield backend


@pytest.fixture(scope="session")
def hf(shared_embedded_backend):
    return shared_embedded_backend
