"""A corpus of bad inputs on the llama-server surfaces (issue 34 item 7): each ends in a typed
error naming the input (or the reply's fault) and a fix, within a bounded time.

Kinds: ``LlamaServerBackend`` constructor arguments, ``launch`` arguments, what a server
claims at start (``/props``, ``/lora-adapters``), ``/completion`` replies from a misbehaving
fake server on 127.0.0.1 (a ``http.server`` thread: positive logprobs, a token twice, ids
beyond the vocabulary, more tokens than ``n_predict``, deep JSON, a stream without end, a
stall), ``manifest.json`` files (paths outside the folder, deep JSON) and ``export-gguf``
outputs (links planted at output names). After a bad reply the backend must still score a
good one. The real-server correctness tests live in ``tests/backends/llama_server``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fake_http import JsonHandler

pytest.importorskip("httpx")
pytest.importorskip("gguf")

from bounded import run_bounded

from mellea_local.backends.llama_server import (
    LlamaServerBackend,
    ServedAdapter,
    read_gguf_folder,
)
from mellea_local.backends.llama_server.client import Deadline
from mellea_local.backends.llama_server.gguf_export import export_gguf
from mellea_local.core.context import ChatContext
from mellea_local.errors import MelleaLocalError
from mellea_local.intrinsics import arequirement_check
from mellea_local.messages import Message

TIMEOUT_S = 60
FIX_WORDS = ("pass ", "check ", "start ", "export ", "remove", "restart", "use ", "create",
             "give ", "fix ", "set ", "shorten", "lower", "convert ")


def assert_typed(exc: BaseException | None, needle: str = "") -> None:
    assert exc is not None, "accepted an invalid input"
    assert isinstance(exc, MelleaLocalError), f"raw {type(exc).__name__}: {exc}"
    message = str(exc)
    assert needle.lower() in message.lower(), f"{needle!r} not named in: {message}"
    assert any(w in message.lower() for w in FIX_WORDS), f"no fix in: {message}"


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus-gguf")
    export_gguf("embedded", out)
    return out


@pytest.fixture(scope="module")
def folder(gguf_dir):
    return read_gguf_folder(gguf_dir)


# ----- a misbehaving llama-server ------------------------------------------------------------

TIMINGS = {"prompt_n": 3, "cache_n": 0, "predicted_n": 1}


def reply(top: list[dict[str, Any]] | None = None, tokens: list[int] | None = None,
          **extra: Any) -> bytes:
    """A /completion reply in llama-server's shape; ``top`` the one position's entries."""
    body: dict[str, Any] = {"tokens": tokens if tokens is not None else [10],
                            "stop_type": "limit", "timings": TIMINGS, **extra}
    if top is not None:
        body["completion_probabilities"] = [{"top_logprobs": top}]
    return json.dumps(body).encode()


def good_top(yes: int, no: int) -> list[dict[str, Any]]:
    """A complete answer: all the mass on the two categories (nothing left to ask for)."""
    return [{"id": yes, "logprob": math.log(0.7)}, {"id": no, "logprob": math.log(0.3)}]


class _Fake(JsonHandler):
    props: ClassVar[bytes] = b'{"total_slots": 1}'
    loras: ClassVar[bytes] = b"[]"
    completion: ClassVar[bytes] = b"{}"
    mode: ClassVar[str] = "reply"  # "reply" | "stream-forever" | "stall"

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b'{"status": "ok"}')
        elif self.path == "/props":
            self._send(200, type(self).props)
        elif self.path == "/lora-adapters":
            self._send(200, type(self).loras)
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        mode = type(self).mode
        if mode == "stall":
            time.sleep(5)
            return
        if mode == "stream-forever":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                for _ in range(100_000):
                    self.wfile.write(b'data: {"tokens": [10], "stop": false}\n\n')
                    self.wfile.flush()
            except OSError:
                pass
            return
        self._send(200, type(self).completion)


@pytest.fixture()
def fake(folder):
    loras = []
    for a in folder.adapters:
        entry: dict[str, Any] = {"id": a.lora_id, "path": str(a.folder), "scale": 0.0}
        if a.name.endswith("alora"):
            entry["alora_invocation_tokens"] = [622, 33]
        loras.append(entry)
    handler = type("Handler", (_Fake,), {"loras": json.dumps(loras).encode()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


CTX = ChatContext().add(Message("user", "Hi.")).add(Message("assistant", "Hello."))


def categories(backend: LlamaServerBackend) -> tuple[int, int]:
    tok = backend.tokenizer
    return tok.encode("yes", add_special_tokens=False)[0], tok.encode(
        "no", add_special_tokens=False)[0]


# ----- constructor arguments (refused before any request) ------------------------------------

CONSTRUCTOR_BAD: dict[str, tuple[dict[str, Any], str]] = {
    "urls a str": ({"urls": "http://127.0.0.1:1"}, "urls"),
    "urls empty": ({"urls": []}, "urls"),
    "urls None": ({"urls": None}, "urls"),
    "urls an int": ({"urls": 5}, "urls"),
    "urls holds an int": ({"urls": [5]}, "urls"),
    "urls holds None": ({"urls": [None]}, "urls"),
    "url without scheme": ({"urls": ["127.0.0.1:8080"]}, "127.0.0.1:8080"),
    "url ftp": ({"urls": ["ftp://127.0.0.1:21"]}, "ftp://"),
    "url with query": ({"urls": ["http://127.0.0.1:1/?x=1"]}, "?x=1"),
    "url with space": ({"urls": ["http://127.0.0.1 :1"]}, "urls"),
    "url with NUL": ({"urls": ["http://127.0.0.1:1\x00"]}, "urls"),
    "url bad port": ({"urls": ["http://127.0.0.1:99999"]}, "99999"),
    "url empty host": ({"urls": ["http://:8080"]}, "urls"),
    "url twice": ({"urls": ["http://127.0.0.1:1", "http://127.0.0.1:1/"]}, "twice"),
    "n_probs 0": ({"n_probs": 0}, "n_probs"),
    "n_probs -5": ({"n_probs": -5}, "n_probs"),
    "n_probs float": ({"n_probs": 2.5}, "n_probs"),
    "n_probs bool": ({"n_probs": True}, "n_probs"),
    "n_probs str": ({"n_probs": "256"}, "n_probs"),
    "max_new_tokens 0": ({"max_new_tokens": 0}, "max_new_tokens"),
    "max_new_tokens None": ({"max_new_tokens": None}, "max_new_tokens"),
    "max_new_tokens -1": ({"max_new_tokens": -1}, "max_new_tokens"),
    "max_new_tokens float": ({"max_new_tokens": 1e9}, "max_new_tokens"),
    "timeout 0": ({"timeout": 0}, "timeout"),
    "timeout negative": ({"timeout": -1.0}, "timeout"),
    "timeout inf": ({"timeout": float("inf")}, "timeout"),
    "timeout nan": ({"timeout": float("nan")}, "timeout"),
    "timeout str": ({"timeout": "10"}, "timeout"),
    "api_key empty": ({"api_key": ""}, "api_key"),
    "api_key with space": ({"api_key": "a b"}, "api_key"),
    "api_key with newline": ({"api_key": "abc\n"}, "api_key"),
    "api_key int": ({"api_key": 1234}, "api_key"),
    "adapters a str": ({"adapters": "alora"}, "adapters"),
    "adapters holds a dict": ({"adapters": [{"lora_id": 0}]}, "adapters"),
    "adapter id negative": ({"adapters": [ServedAdapter(-1, Path("x"))]}, "lora_id"),
    "adapter id str": ({"adapters": [ServedAdapter("0", Path("x"))]}, "lora_id"),  # type: ignore[arg-type]
    "model_id empty": ({"model_id": "  "}, "model_id"),
    "model_id int": ({"model_id": 3}, "model_id"),
    "fresh a str": ({"fresh": "yes"}, "fresh"),
    "deadline a number": ({"deadline": 30}, "deadline"),
    "tokenizer None": ({"tokenizer": None}, "tokenizer"),
    "tokenizer an int": ({"tokenizer": 7}, "tokenizer"),
    "tokenizer a missing folder": ({"tokenizer": "/nonexistent/tok"}, "/nonexistent/tok"),
    "tokenizer an empty folder": ({"tokenizer": "EMPTY"}, "tokenizer"),
    "tokenizer an object without decode": ({"tokenizer": object()}, "tokenizer"),
    "adapter folder missing": ({"adapters": [ServedAdapter(0, Path("/nonexistent/ad"))]},
                               "/nonexistent/ad"),
}


@pytest.mark.parametrize("name", list(CONSTRUCTOR_BAD))
def test_constructor_argument(name, folder, tmp_path):
    kwargs, needle = CONSTRUCTOR_BAD[name]
    if kwargs.get("tokenizer") == "EMPTY":
        kwargs = {"tokenizer": tmp_path}
    args = {"urls": ["http://127.0.0.1:9"], "tokenizer": folder.tokenizer, **kwargs}
    urls = args.pop("urls")
    _, exc = run_bounded(lambda: LlamaServerBackend(urls, **args), TIMEOUT_S)
    assert_typed(exc, needle)


def test_duplicate_adapter_ids_are_refused(folder):
    twice = [ServedAdapter(0, folder.adapters[0].folder),
             ServedAdapter(0, folder.adapters[1].folder)]
    _, exc = run_bounded(lambda: LlamaServerBackend(
        ["http://127.0.0.1:9"], tokenizer=folder.tokenizer, adapters=twice), TIMEOUT_S)
    assert_typed(exc, "twice")


# ----- launch arguments (refused before any process starts) ----------------------------------

LAUNCH_BAD: dict[str, tuple[dict[str, Any], str]] = {
    "servers 0": ({"servers": 0}, "servers"),
    "servers 10**6": ({"servers": 10**6}, "servers"),
    "servers bool": ({"servers": True}, "servers"),
    "servers float": ({"servers": 1.0}, "servers"),
    "threads 0": ({"threads": 0}, "threads"),
    "threads float": ({"threads": 1.5}, "threads"),
    "slots 0": ({"slots": 0}, "slots"),
    "slots 10**9": ({"slots": 10**9}, "slots"),
    "slots str": ({"slots": "4"}, "slots"),
    "ctx 0": ({"ctx": 0}, "ctx"),
    "ctx 10**12": ({"ctx": 10**12}, "ctx"),
    "ctx float": ({"ctx": 4096.0}, "ctx"),
    "log_dir missing": ({"log_dir": "/nonexistent/mellea/logs"}, "/nonexistent/mellea/logs"),
    "log_dir an int": ({"log_dir": 5}, "log_dir"),
    "log_dir empty": ({"log_dir": ""}, "log_dir"),
}


@pytest.mark.parametrize("name", list(LAUNCH_BAD))
def test_launch_argument(name, gguf_dir):
    kwargs, needle = LAUNCH_BAD[name]
    _, exc = run_bounded(lambda: LlamaServerBackend.launch(gguf_dir, **kwargs), TIMEOUT_S)
    assert_typed(exc, needle)


def test_launch_log_dir_that_is_a_file(gguf_dir, tmp_path):
    file = tmp_path / "log"
    file.write_text("x")
    _, exc = run_bounded(lambda: LlamaServerBackend.launch(gguf_dir, log_dir=file), TIMEOUT_S)
    assert_typed(exc, str(file))


# ----- what a server claims at start ---------------------------------------------------------

DEEP = "[" * 5000 + "]" * 5000
CLAIMS_BAD: dict[str, tuple[str, bytes, str]] = {
    "10**9 slots": ("props", b'{"total_slots": 1000000000}', "total_slots"),
    "0 slots": ("props", b'{"total_slots": 0}', "total_slots"),
    "negative slots": ("props", b'{"total_slots": -3}', "total_slots"),
    "slots a str": ("props", b'{"total_slots": "4"}', "total_slots"),
    "slots a bool": ("props", b'{"total_slots": true}', "total_slots"),
    "props a list": ("props", b"[1, 2]", "total_slots"),
    "props not json": ("props", b"<html>", "not JSON"),
    "props deep json": ("props", DEEP.encode(), "deeper"),
    "huge n_ctx": ("props", b'{"total_slots": 1, "default_generation_settings": '
                            b'{"n_ctx": 1000000000000}}', "n_ctx"),
    "negative n_ctx": ("props", b'{"total_slots": 1, "default_generation_settings": '
                                b'{"n_ctx": -1}}', "n_ctx"),
    "n_ctx a float": ("props", b'{"total_slots": 1, "default_generation_settings": '
                               b'{"n_ctx": 4096.5}}', "n_ctx"),
    "loras deep json": ("loras", DEEP.encode(), "deeper"),
    "loras an object": ("loras", b'{"id": 0}', "lora-adapters"),
    "loras empty": ("loras", b"[]", "no adapter"),
}


@pytest.mark.parametrize("name", list(CLAIMS_BAD))
def test_server_claim(name, fake, gguf_dir):
    handler, url = fake
    which, body, needle = CLAIMS_BAD[name]
    setattr(handler, which, body)
    _, exc = run_bounded(lambda: LlamaServerBackend.connect([url], gguf_dir), TIMEOUT_S)
    assert_typed(exc, needle)


# ----- /completion replies -------------------------------------------------------------------

def _bad_replies(yes: int, no: int) -> dict[str, tuple[bytes, str]]:
    return {
        "positive logprob": (reply([{"id": yes, "logprob": 2.0}, {"id": no, "logprob": -1}]),
                             "> 0"),
        "token twice": (reply([{"id": yes, "logprob": -0.1}, {"id": no, "logprob": -2.4},
                               {"id": yes, "logprob": -2.3}]), "twice"),
        "id beyond vocab": (reply([{"id": 10**6, "logprob": -0.1}]), "beyond the vocabulary"),
        "id negative": (reply([{"id": -1, "logprob": -0.1}]), "'id'"),
        "id a float": (reply([{"id": 1.5, "logprob": -0.1}]), "'id'"),
        "id a str": (reply([{"id": "yes", "logprob": -0.1}]), "'id'"),
        "logprob nan": (b'{"tokens": [1], "stop_type": "limit", "timings": {"prompt_n": 1, '
                        b'"cache_n": 0, "predicted_n": 1}, "completion_probabilities": '
                        b'[{"top_logprobs": [{"id": 1, "logprob": NaN}]}]}', "logprob"),
        "logprob a str": (reply([{"id": yes, "logprob": "-0.1"}]), "logprob"),
        "probabilities above 1": (reply([{"id": yes, "logprob": -0.1}, {"id": no,
                                                                       "logprob": -0.2}]),
                                  "summing"),
        "more tokens than n_predict": (reply(good_top(yes, no), tokens=list(range(500))),
                                       "n_predict"),
        "more positions than n_predict": (json.dumps({
            "tokens": [1], "stop_type": "limit", "timings": TIMINGS,
            "completion_probabilities": [{"top_logprobs": good_top(yes, no)}] * 5}).encode(),
            "n_predict"),
        "more entries than n_probs": (reply([{"id": i, "logprob": -9.0} for i in range(300)]),
                                      "n_probs"),
        "empty top": (reply([]), "n_probs"),
        "token ids beyond vocab": (reply(good_top(yes, no), tokens=[10**7]),
                                   "beyond the vocabulary"),
        "tokens a str": (reply(good_top(yes, no), tokens="abc"), "tokens"),  # type: ignore[arg-type]
        "no timings": (json.dumps({"tokens": [1], "stop_type": "limit",
                                   "completion_probabilities": [
                                       {"top_logprobs": good_top(yes, no)}]}).encode(),
                       "timings"),
        "timings negative": (reply(good_top(yes, no), timings={"prompt_n": -1, "cache_n": 0,
                                                               "predicted_n": 1}),
                             "prompt_n"),
        "no stop_type": (json.dumps({"tokens": [1], "timings": TIMINGS,
                                     "completion_probabilities": [
                                         {"top_logprobs": good_top(yes, no)}]}).encode(),
                         "stop_type"),
        "truncated": (reply(good_top(yes, no), truncated=True), "context"),
        "deep json": (("{\"a\": " + DEEP + "}").encode(), "deeper"),
        "not json": (b"<html>oops</html>", "not JSON"),
        "a list": (b"[1, 2, 3]", "not an object"),
        "no probabilities": (reply(None), "completion_probabilities"),
        "server error": (b'{"error": {"message": "boom"}}', "boom"),
    }


BAD_REPLY_NAMES = list(_bad_replies(1, 2))


@pytest.mark.parametrize("name", BAD_REPLY_NAMES)
async def test_completion_reply(name, fake, gguf_dir):
    handler, url = fake
    backend = LlamaServerBackend.connect([url], gguf_dir)
    yes, no = categories(backend)
    body, needle = _bad_replies(yes, no)[name]
    handler.completion = body
    if name == "server error":
        handler.completion = body
    exc = None
    try:
        await asyncio.wait_for(arequirement_check(CTX, backend, "The answer is short."),
                               TIMEOUT_S)
    except Exception as caught:  # inspected below
        exc = caught
    assert_typed(exc, needle)
    # the backend stays usable: a good reply scores as it says
    handler.completion = reply(good_top(yes, no))
    score = await arequirement_check(CTX, backend, "The answer is short.")
    assert abs(score - 0.7) < 1e-6


async def test_categories_missing_from_a_full_reply_are_an_error_not_a_zero(fake, gguf_dir):
    """The server answers with some other token only, even when asked for every token:
    the categories' absence must not read as a confident 0.0."""
    handler, url = fake
    backend = LlamaServerBackend.connect([url], gguf_dir)
    handler.completion = reply([{"id": 100, "logprob": -0.01}])
    with pytest.raises(MelleaLocalError, match="categories") as info:
        await arequirement_check(CTX, backend, "The answer is short.")
    assert_typed(info.value, "returned 1")


async def test_a_stream_without_end_is_cut_at_n_predict(fake, gguf_dir):
    handler, url = fake
    backend = LlamaServerBackend.connect([url], gguf_dir, max_new_tokens=5)
    handler.mode = "stream-forever"
    mot, _ = await backend.generate_from_context(Message("user", "Hi"), ChatContext())
    with pytest.raises(MelleaLocalError) as info:
        await asyncio.wait_for(mot.avalue(), TIMEOUT_S)
    assert_typed(info.value, "n_predict=5")


async def test_a_stalled_server_meets_the_deadline(fake, gguf_dir):
    handler, url = fake
    backend = LlamaServerBackend.connect(
        [url], gguf_dir, deadline=Deadline(base_s=0.5, per_prompt_token_s=0.0,
                                           per_new_token_s=0.0))
    handler.mode = "stall"
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        await arequirement_check(CTX, backend, "The answer is short.")
    assert time.monotonic() - started < 4.0
    assert_typed(info.value, "deadline")


# ----- manifest.json -------------------------------------------------------------------------

def _manifest_case(gguf_dir: Path, tmp: Path, change: Any) -> Path:
    copy = tmp / "gguf"
    shutil.copytree(gguf_dir, copy, symlinks=True)
    data = json.loads((copy / "manifest.json").read_text())
    text = change(data, copy)
    (copy / "manifest.json").write_text(text if isinstance(text, str) else json.dumps(data))
    return copy


def _set(key: str, value: Any) -> Any:
    def change(data: dict[str, Any], _: Path) -> None:
        data[key] = value
    return change


def _set_adapter(key: str, value: Any) -> Any:
    def change(data: dict[str, Any], _: Path) -> None:
        data["adapters"][0][key] = value
    return change


def _link_out(data: dict[str, Any], copy: Path) -> None:
    (copy / "evil").symlink_to("/etc")
    data["base"] = "evil/passwd"


MANIFEST_BAD: dict[str, tuple[Any, str]] = {
    "base absolute": (_set("base", "/etc/passwd"), "/etc/passwd"),
    "base parent": (_set("base", "../../etc/passwd"), "outside"),
    "tokenizer absolute": (_set("tokenizer", "/tmp"), "outside"),
    "tokenizer parent": (_set("tokenizer", ".."), "outside"),
    "adapter file absolute": (_set_adapter("file", "/etc/hostname"), "outside"),
    "adapter folder parent": (_set_adapter("folder", "../x"), "outside"),
    "base through a link": (_link_out, "outside"),
    "base an int": (_set("base", 5), "relative path"),
    "base empty": (_set("base", ""), "relative path"),
    "base with NUL": (_set("base", "a\x00b"), "relative path"),
    "adapters not a list": (_set("adapters", 5), "malformed"),
    "adapter intrinsic an int": (_set_adapter("intrinsic", 3), "malformed"),
    "no model": (lambda d, _: d.pop("model"), "model"),
    "deep json": (lambda d, _: '{"a": ' + DEEP + "}", "deeper"),
    "not json": (lambda d, _: "{not json", "not JSON"),
    "missing base file": (_set("base", "nothere.gguf"), "missing"),
}


@pytest.mark.parametrize("name", list(MANIFEST_BAD))
def test_manifest(name, gguf_dir, tmp_path):
    change, needle = MANIFEST_BAD[name]
    copy = _manifest_case(gguf_dir, tmp_path, change)
    _, exc = run_bounded(lambda: read_gguf_folder(copy), TIMEOUT_S)
    assert_typed(exc, needle)


@pytest.mark.parametrize("kwargs", [{"base_s": 0}, {"base_s": -1.0}, {"base_s": float("nan")},
                                    {"per_new_token_s": float("inf")},
                                    {"per_prompt_token_s": "1"}, {"base_s": True}])
def test_deadline(kwargs):
    _, exc = run_bounded(lambda: Deadline(**kwargs), TIMEOUT_S)
    assert_typed(exc, next(iter(kwargs)))


@pytest.mark.parametrize("value", [None, 5, "", "a\x00b"])
def test_gguf_dir_that_is_not_a_path(value):
    _, exc = run_bounded(lambda: read_gguf_folder(value), TIMEOUT_S)
    assert_typed(exc, "gguf_dir")


# ----- export-gguf ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["base-f32.gguf", "tokenizer"])
def test_export_refuses_a_link_planted_at_an_output(name, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir() if name == "tokenizer" else victim.write_bytes(b"precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    _, exc = run_bounded(lambda: export_gguf("embedded", out), TIMEOUT_S)
    assert_typed(exc, "link")
    if name != "tokenizer":
        assert victim.read_bytes() == b"precious"
    else:
        assert list(victim.iterdir()) == []


def test_export_replaces_nothing_through_a_link_at_the_manifest(tmp_path):
    """A link at manifest.json: refused before writing it; the target keeps its bytes."""
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").symlink_to(victim)
    _, exc = run_bounded(lambda: export_gguf("embedded", out), TIMEOUT_S)
    assert_typed(exc, "link")
    assert victim.read_text() == "precious"


def _broken_model(tmp: Path, config: str | None) -> Path:
    model = tmp / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"not safetensors")
    if config is not None:
        (model / "config.json").write_text(config)
    return model


EXPORT_BAD: dict[str, tuple[Any, Any, str]] = {
    "model None": (None, "out", "model"),
    "model int": (5, "out", "model"),
    "model empty": ("", "out", "model"),
    "out None": ("embedded", None, "out_dir"),
    "model missing folder": ("/nonexistent/model", "out", "/nonexistent/model"),
    "config not json": ("broken:{", "out", "export-gguf"),
    "config a list": ("broken:[1]", "out", "export-gguf"),
    "config not llama": ('broken:{"model_type": "gpt2"}', "out", "gpt2"),
    "config missing sizes": ('broken:{"model_type": "llama"}', "out", "export-gguf"),
    "out is a file": ("embedded", "FILE", "not a folder"),
}


@pytest.mark.parametrize("name", list(EXPORT_BAD))
def test_export_input(name, tmp_path):
    model, out, needle = EXPORT_BAD[name]
    if isinstance(model, str) and model.startswith("broken:"):
        model = _broken_model(tmp_path, model.removeprefix("broken:"))
    if out == "FILE":
        out = tmp_path / "file"
        out.write_text("x")
    elif out == "out":
        out = tmp_path / "out"
    _, exc = run_bounded(lambda: export_gguf(model, out), TIMEOUT_S)
    assert_typed(exc, needle)


def test_launch_leaves_no_temporary_folder(gguf_dir):
    """Needs the binary: a launched server's temporary folder (its key and log) is gone after
    close()."""
    from mellea_local.backends.llama_server.launch import find_binary
    from mellea_local.errors import LlamaServerBinaryError

    try:
        find_binary()
    except LlamaServerBinaryError:
        pytest.skip("no llama-server binary")
    backend = LlamaServerBackend.launch(gguf_dir, threads=1, slots=1, ctx=512)
    temp = backend.processes[0].temp_dir
    assert temp is not None and temp.is_dir()
    assert oct(temp.stat().st_mode & 0o777) == oct(0o700)
    key_file = temp / "api-key"
    assert oct(key_file.stat().st_mode & 0o777) == oct(0o600)
    assert backend.processes[0].api_key not in " ".join(backend.processes[0].command)
    backend.close()
    assert not temp.exists()
    assert os.path.exists(gguf_dir)
