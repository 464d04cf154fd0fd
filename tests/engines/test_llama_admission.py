"""llama-server refuses what LocalHFBackend refuses: the adapters a server was started with
pass the same admission path (``ServingBackend.admit_adapter``) when the client connects."""

from __future__ import annotations

import json
import shutil

import pytest

from mellea_local.errors import IOConfigError


def test_a_served_adapter_with_an_unsupported_io_yaml_is_refused(engines_llama, engines_gguf,
                                                                  tmp_path):
    from mellea_local.backends.llama_server import LlamaServerBackend

    copy = tmp_path / "gguf"
    shutil.copytree(engines_gguf, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    folder = copy / manifest["adapters"][0]["folder"]
    io_yaml = folder / "io.yaml"
    io_yaml.write_text(io_yaml.read_text().replace("  temperature: 0.0",
                                                   "  temperature: 0.0\n  top_p: 0.9"))
    with pytest.raises(IOConfigError, match="top_p"):
        LlamaServerBackend.connect(engines_llama.urls, copy,
                                   api_key=engines_llama._api_key)
    # the running servers are untouched and the unaltered folder still connects
    with LlamaServerBackend.connect(engines_llama.urls, engines_gguf,
                                    api_key=engines_llama._api_key) as again:
        assert again.adapters.keys() == engines_llama.adapters.keys()
