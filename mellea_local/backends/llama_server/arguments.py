"""Checks of the arguments of ``LlamaServerBackend`` and ``launch``, and caps on what a server
may claim about itself.

Each check raises a typed error naming the argument, the value and the fix, before anything
is started or sent (issue 34: the constructor and ``launch`` let raw ``TypeError`` /
``ValueError`` / ``FileNotFoundError`` escape, and trusted ``/props`` to size the slot table).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from mellea_local.backends.llama_server.manifest import ServedAdapter
from mellea_local.errors import InputTypeError, InvalidInputError, LlamaServerResponseError

MAX_SLOTS = 1024
"""The most slots a server may report in ``/props`` (llama.cpp's ``-np`` is tens at most)."""
MAX_CTX = 1 << 22
"""The most positions per slot a server may report (no model here has more)."""
MAX_SERVERS = 64
"""The most servers ``launch`` starts on one machine."""


def check_int(name: str, value: Any, *, low: int, high: int | None = None,
              fix: str = "") -> int:
    """``value`` as an int in ``[low, high]``; bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputTypeError(f"{name}={value!r} is a {type(value).__name__}; pass an int "
                             f"(at least {low}){fix}.")
    if value < low or (high is not None and value > high):
        span = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise InvalidInputError(f"{name}={value!r} is out of range; pass an int {span}{fix}.")
    return value


def check_urls(urls: Any) -> list[str]:
    """A non-empty list of distinct ``http(s)://host:port`` base URLs, without trailing '/'."""
    if isinstance(urls, str | bytes) or not isinstance(urls, Sequence) or not urls:
        raise InvalidInputError(
            f"urls={urls!r}: pass a non-empty list of llama-server base URLs, e.g. "
            "['http://127.0.0.1:8080'].")
    out = []
    for url in urls:
        if not isinstance(url, str):
            raise InputTypeError(f"urls holds {url!r} ({type(url).__name__}); pass each "
                                 "server as a str such as 'http://127.0.0.1:8080'.")
        try:
            parts = urlsplit(url.strip())
            if parts.port == 0:  # .port raises ValueError for a port out of range
                parts = None
        except ValueError:
            parts = None
        if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname
                or parts.query or parts.fragment or "\x00" in url
                or any(c.isspace() for c in url.strip())):
            raise InvalidInputError(
                f"urls holds {url!r}, not a server base URL; pass 'http://HOST:PORT' (no "
                "path, query or spaces), e.g. 'http://127.0.0.1:8080'.")
        out.append(url.strip().rstrip("/"))
    if len(set(out)) != len(out):
        raise InvalidInputError(f"urls={urls!r} names a server twice; pass each server once.")
    return out


def check_adapters(adapters: Any) -> list[ServedAdapter]:
    if isinstance(adapters, str | bytes) or not isinstance(adapters, Sequence):
        raise InputTypeError(
            f"adapters={adapters!r}: pass a list of ServedAdapter (read_gguf_folder(DIR)"
            ".adapters for an export-gguf folder).")
    ids = []
    for served in adapters:
        if not isinstance(served, ServedAdapter):
            raise InputTypeError(
                f"adapters holds {served!r}; pass ServedAdapter(lora_id, folder) entries "
                "(read_gguf_folder(DIR).adapters builds them).")
        check_int("ServedAdapter.lora_id", served.lora_id, low=0, high=4095)
        ids.append(served.lora_id)
    if len(set(ids)) != len(ids):
        raise InvalidInputError(f"adapters use the server lora ids {ids}, one twice; give "
                                "each adapter its own id (its position in --lora-scaled).")
    return list(adapters)


def check_timeout(timeout: Any) -> httpx.Timeout | float:
    if isinstance(timeout, httpx.Timeout):
        return timeout
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InputTypeError(f"timeout={timeout!r}: pass seconds as a number or an "
                             "httpx.Timeout.")
    if not math.isfinite(timeout) or timeout <= 0:
        raise InvalidInputError(f"timeout={timeout!r}: pass a positive, finite number of "
                                "seconds.")
    return float(timeout)


def check_api_key(api_key: Any) -> str | None:
    if api_key is None:
        return None
    if not isinstance(api_key, str) or not api_key or any(
            not c.isprintable() or c.isspace() for c in api_key):
        raise InvalidInputError(
            "api_key must be a non-empty str of printable characters without spaces (the "
            "server's --api-key); pass it as started, or None for a server without one.")
    return api_key


def check_log_dir(log_dir: Any) -> Path | None:
    """An existing, writable folder for the servers' logs (None: a temporary one)."""
    if log_dir is None:
        return None
    if not isinstance(log_dir, str | os.PathLike) or not str(log_dir):
        raise InputTypeError(f"log_dir={log_dir!r}: pass a folder path (str or Path) or None.")
    path = Path(log_dir).expanduser()
    if not path.is_dir():
        raise InvalidInputError(
            f"log_dir={str(log_dir)!r} is not an existing folder; create it first "
            "(mkdir -p) or pass None for a temporary one.")
    if not os.access(path, os.W_OK | os.X_OK):
        raise InvalidInputError(f"log_dir={str(log_dir)!r} is not writable; pass a folder "
                                "you can write to, or None.")
    return path


def checked_claims(url: str, props: Any) -> tuple[int, int | None]:
    """A server's ``/props`` slot count and context per slot, within ``MAX_SLOTS`` /
    ``MAX_CTX``: a server claiming 10**9 slots would make the client build 10**9 slot
    objects (a hang), one claiming a huge context would let prompts through it cannot hold."""
    slots = props.get("total_slots") if isinstance(props, dict) else None
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= MAX_SLOTS:
        raise LlamaServerResponseError(
            f"{url}: /props claims total_slots={str(slots)[:40]!r}, not a slot count from 1 to "
            f"{MAX_SLOTS}: it is not a llama-server as launched here. Check the URL, or "
            "start the server with -np N.")
    settings = props.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    if n_ctx is None:
        return slots, None
    if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or not 1 <= n_ctx <= MAX_CTX:
        raise LlamaServerResponseError(
            f"{url}: /props claims n_ctx={str(n_ctx)[:40]!r} positions per slot, not a count "
            f"from 1 to {MAX_CTX}. Check the URL, or start the server with a sane -c.")
    return slots, n_ctx


def load_tokenizer(tokenizer: Any) -> Any:
    """A tokenizer object as given, or loaded from a folder; None is refused."""
    if tokenizer is None or isinstance(tokenizer, bool | int | float):
        raise InputTypeError(f"tokenizer={tokenizer!r}: pass the base model's tokenizer (an "
                             "object or its folder, e.g. read_gguf_folder(DIR).tokenizer).")
    if isinstance(tokenizer, str | os.PathLike):
        from transformers import AutoTokenizer

        if not Path(tokenizer).expanduser().is_dir():
            raise InvalidInputError(
                f"tokenizer={str(tokenizer)!r} is not a folder; pass the base model's "
                "tokenizer folder (read_gguf_folder(DIR).tokenizer) or a tokenizer object.")
        try:
            return AutoTokenizer.from_pretrained(str(Path(tokenizer).expanduser()))
        except (OSError, ValueError, TypeError) as exc:
            raise InvalidInputError(
                f"tokenizer={str(tokenizer)!r} cannot be loaded ({type(exc).__name__}: "
                f"{str(exc)[:200]}); pass a folder with tokenizer.json and "
                "tokenizer_config.json (export-gguf writes one).") from exc
    if not callable(getattr(tokenizer, "decode", None)) or not hasattr(tokenizer, "__len__"):
        raise InputTypeError(f"tokenizer={tokenizer!r} is not a tokenizer (no decode / len); "
                             "pass the base model's tokenizer or its folder.")
    return tokenizer


def default_budget(model_dir: Path) -> int:
    """The model's own ``max_new_tokens`` (generation_config.json), as transformers uses it."""
    import json

    try:
        config = json.loads((model_dir / "generation_config.json").read_text(encoding="utf-8"))
        budget = config.get("max_new_tokens") if isinstance(config, dict) else None
        return budget if isinstance(budget, int) and budget > 0 else 256
    except (OSError, ValueError, RecursionError):
        return 256


def check_settings(*, model_id: Any, deadline: Any, fresh: Any) -> None:
    from mellea_local.backends.llama_server.client import Deadline

    if not isinstance(model_id, str) or not model_id.strip():
        raise InvalidInputError(f"model_id={model_id!r}: pass a non-empty str naming the "
                                "model (it appears in results and errors).")
    if deadline is not None and not isinstance(deadline, Deadline):
        raise InputTypeError(f"deadline={deadline!r}: pass a client.Deadline or None.")
    if not isinstance(fresh, bool):
        raise InputTypeError(f"fresh={fresh!r}: pass True or False.")


def check_launch(*, servers: Any, threads: Any, slots: Any, ctx: Any) -> None:
    check_int("servers", servers, low=1, high=MAX_SERVERS)
    if threads is not None:
        check_int("threads", threads, low=1, high=1024, fix=" or None for the CPU count")
    check_int("slots", slots, low=1, high=MAX_SLOTS)
    check_int("ctx", ctx, low=16, high=MAX_CTX, fix=" (positions per slot)")
