"""The engines a command line can pick (``--backend``): one line each.

Each entry names a loader ``(model, *, device, dtype, model_options, server_urls, api_key,
threads) -> ServingBackend`` by import path, so this module imports no engine and a new engine
is its folder plus one line here (the conformance suite in ``tests/engines/`` is what it must
pass).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

BACKENDS: dict[str, str] = {
    "hf": "mellea_local.launch:load_hf_backend",
    "llama-server": "mellea_local.backends.llama_server.cli:load_llama_backend",
}


def backend_loader(name: str) -> Callable[..., Any]:
    """The loader registered under ``name`` (the caller checked the name)."""
    module, _, attr = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
