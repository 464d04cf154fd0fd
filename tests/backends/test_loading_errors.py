"""LocalHFBackend(...) refuses bad arguments before loading, and every load failure is typed.

Issue 28 D10 and the first hour: no raw safetensors/tokenizer/OSError escapes, each error
names the input and the fix, and a hub id with no network fails in seconds, not ~47 s.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from adapter_folders import WEIGHTS
from bounded import run_bounded

from mellea_local.backends.hf import backend as hf_module
from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.errors import BackendArgumentError, ModelLoadError


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"model": None}, "model=None"),
    ({"model": 5}, "model=5"),
    ({"model": ""}, "model=''"),
    ({"device": "tpu"}, "device='tpu'"),
    ({"device": 3.5}, "device=3.5"),
    ({"dtype": "float64"}, "dtype='float64'"),
    ({"dtype": "int8"}, "dtype='int8'"),
    ({"dtype": torch.float64}, "dtype=torch.float64"),
    ({"kv_cache_tokens": -1}, "kv_cache_tokens=-1"),
    ({"kv_cache_tokens": "lots"}, "kv_cache_tokens='lots'"),
    ({"kv_cache_tokens": True}, "kv_cache_tokens=True"),
    ({"model_options": 5}, "model_options=5"),
    ({"model_options": ["temperature"]}, "model_options=['temperature']"),
])
def test_bad_arguments_are_refused_before_any_load(kwargs, needle, monkeypatch):
    def never(*args, **kw):
        raise AssertionError("loaded weights before checking the arguments")

    monkeypatch.setattr(hf_module, "load_pretrained", never)
    kwargs = {"model": WEIGHTS, **kwargs}
    model = kwargs.pop("model")
    with pytest.raises(BackendArgumentError) as err:
        LocalHFBackend(model, **kwargs)
    assert needle in str(err.value)
    assert isinstance(err.value, ValueError)


def test_from_loaded_checks_the_cache_budget_too(tiny_model, tiny_tokenizer):
    with pytest.raises(BackendArgumentError, match="kv_cache_tokens=-3"):
        LocalHFBackend.from_loaded(tiny_model, tiny_tokenizer, kv_cache_tokens=-3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_an_absent_device_is_named():
    with pytest.raises(BackendArgumentError, match="device='cuda' is not available"):
        LocalHFBackend(WEIGHTS, device="cuda")


@pytest.mark.parametrize(("file", "damage"), [
    ("model.safetensors", lambda p: p.write_bytes(p.read_bytes()[:1000])),
    ("model.safetensors", lambda p: p.write_bytes(b"")),
    ("tokenizer.json", lambda p: p.write_text("{nope")),
    ("config.json", lambda p: p.write_text("{nope")),
    ("config.json", lambda p: p.unlink()),
    ("tokenizer_config.json", lambda p: p.write_bytes(b"\xff\xfe")),
])
def test_a_damaged_model_folder_is_a_model_load_error(tmp_path, file, damage):
    folder = tmp_path / "model"
    shutil.copytree(WEIGHTS, folder)
    damage(folder / file)
    _, error = run_bounded(lambda: LocalHFBackend(folder, device="cpu"))
    assert isinstance(error, ModelLoadError), repr(error)
    assert str(folder) in str(error) and "again" in str(error)


def test_a_hub_id_without_network_fails_fast_with_the_fixes(monkeypatch):
    from mellea_local.backends import loading

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: refused
    for var in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    assert loading.hub_reachable() is False
    _, error = run_bounded(lambda: LocalHFBackend("ibm-granite/no-such-model", device="cpu"),
                           30)
    assert isinstance(error, ModelLoadError), repr(error)
    message = str(error)
    assert "ibm-granite/no-such-model" in message and "127.0.0.1:9" in message
    assert "local model folder" in message and "HF_HUB_OFFLINE" in message
    assert "hf download ibm-granite/no-such-model" in message


def test_a_listening_endpoint_counts_as_reachable(monkeypatch):
    import socket

    from mellea_local.backends import loading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        for var in ("HTTPS_PROXY", "https_proxy"):
            monkeypatch.delenv(var, raising=False)
        assert loading.hub_reachable() is True
        monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
        assert loading.hub_endpoint() == ("127.0.0.1", 9)  # the proxy is what we reach first
    finally:
        server.close()
