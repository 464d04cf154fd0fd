"""``--backend llama-server``: a ``LlamaServerBackend`` from command-line arguments.

``--model`` is an ``export-gguf`` folder (one holding ``manifest.json``), or a model
``export-gguf`` accepts (``embedded``, a registered name, a folder), exported once into a
temporary folder for the run. With ``--server-url`` the client connects to servers the user
runs on that folder (their ``--api-key`` from a file or ``MELLEA_LOCAL_API_KEY``); without,
one server is started on 127.0.0.1 and stopped when the process ends.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mellea_local.errors import BackendArgumentError


def export_folder(model: str) -> Path:
    """``model`` itself when it is an export folder, else a fresh export of it (removed at
    exit)."""
    path = Path(model).expanduser()
    if (path / "manifest.json").is_file():
        return path
    from mellea_local.backends.llama_server.gguf_export import export_gguf

    out = Path(tempfile.mkdtemp(prefix="mellea-local-gguf-"))
    atexit.register(shutil.rmtree, out, True)
    export_gguf(model, out)
    return out


def load_llama_backend(
    model: str, *, device: str | None = None, dtype: str | None = None,
    model_options: dict[str, Any] | None = None, server_urls: Sequence[str] = (),
    api_key: str | None = None, threads: int | None = None,
) -> Any:
    """Connect to ``server_urls`` serving ``model``'s export, or launch one server on it."""
    if device is not None or dtype is not None:
        raise BackendArgumentError(
            "--device/--dtype choose the hf backend's torch device and precision; a "
            "llama-server runs the GGUF's own (f32 K/V, its CPU threads). Leave them out with "
            "--backend llama-server.")
    from mellea_local.backends.llama_server import LlamaServerBackend

    if server_urls:
        if not (Path(model).expanduser() / "manifest.json").is_file():
            raise BackendArgumentError(
                f"--server-url with --model {model!r}: pass the export-gguf folder the "
                "servers were started on (it holds manifest.json): the client reads the "
                "tokenizer and each adapter's lora id from it.")
        return LlamaServerBackend.connect(list(server_urls), Path(model).expanduser(),
                                          api_key=api_key, model_options=model_options)
    if api_key is not None:
        raise BackendArgumentError(
            "An API key is for --server-url; a server this command starts gets a random one. "
            "Add --server-url or leave the key out.")
    return LlamaServerBackend.launch(export_folder(model), servers=1, threads=threads,
                                     model_options=model_options)
