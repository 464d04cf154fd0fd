"""The engines the conformance suite runs on: one registry line each.

``ENGINES`` maps a name to a fixture-style factory ``(request) -> backend``. The HF engine is
the shipped tiny model with its trained adapters; the llama-server engine is a real server on
the same model, exported to GGUF (skipped cleanly without the binary); the fake engine is
scripted and proves only the shared layer. A new engine adds one line here and passes the
suite unchanged.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_LLAMA_CONFTEST = Path(__file__).parents[1] / "backends" / "llama_server" / "conftest.py"


def _llama_conftest() -> Any:
    """The llama-server tests' own conftest (its binary probe and ``HOW``), reused."""
    spec = importlib.util.spec_from_file_location("llama_server_conftest", _LLAMA_CONFTEST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hf(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("engines_hf")


def _llama(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("engines_llama")


def _fake(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("engines_fake")


ENGINES: dict[str, Callable[[pytest.FixtureRequest], Any]] = {
    "hf": _hf,
    "llama-server": _llama,
    "fake": _fake,
}


@pytest.fixture(scope="session")
def engines_hf() -> Any:
    """Its own backend: the suite adds (and is refused) adapters, unlike the shared one."""
    from mellea_local.backends.hf.backend import LocalHFBackend

    return LocalHFBackend.embedded()


@pytest.fixture(scope="session")
def engines_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded model and its adapters exported for llama-server (skip without it)."""
    llama = _llama_conftest()
    if llama.BINARY is None:
        pytest.skip(f"no llama-server binary: {llama.HOW}")
    from mellea_local.backends.llama_server.gguf_export import export_gguf

    out = tmp_path_factory.mktemp("engines-gguf")
    export_gguf("embedded", out)
    return out


@pytest.fixture(scope="session")
def engines_llama(engines_gguf: Path) -> Any:
    from mellea_local.backends.llama_server import LlamaServerBackend

    with LlamaServerBackend.launch(engines_gguf, servers=1, threads=1, slots=4,
                                   ctx=2048) as backend:
        yield backend


@pytest.fixture(scope="session")
def engines_fake(tiny_tokenizer: Any) -> Any:
    from engines.fake import FakeBackend
    from mellea_local.adapters import default_library_roots, find_in_library
    from mellea_local.embedded import trained_weights_dir

    backend = FakeBackend(tiny_tokenizer, model_id=str(trained_weights_dir()))
    for kind in ("alora", "lora"):
        found = find_in_library("requirement-check", trained_weights_dir(),
                                roots=default_library_roots(), kinds=(kind,))
        assert found is not None
        backend.add_adapter(found.path, name=f"requirement-check_{kind}")
    return backend


@pytest.fixture(params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest) -> tuple[str, Any]:
    """``(name, backend)`` for each registered engine."""
    return request.param, ENGINES[request.param](request)
