"""What the backend checks of each server before using it: health, its claims (``/props``,
capped: ``arguments.checked_claims``) and that it serves every adapter as exported (id, scale
0, the aLoRA invocation as ``export-gguf`` writes it). Each failure is a typed error naming
the server and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from mellea_local.backends.adapter_registry import Adapter
from mellea_local.backends.llama_server.arguments import checked_claims
from mellea_local.backends.llama_server.client import loads_reply
from mellea_local.backends.llama_server.gguf_export import exported_invocation
from mellea_local.errors import (
    LlamaServerAdapterError,
    LlamaServerResponseError,
    LlamaServerUnavailableError,
)


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def check_servers(urls: list[str], *, api_key: str | None,
                  served: Mapping[str, tuple[Adapter, int]],
                  ) -> list[tuple[str, int, int | None]]:
    """Each server's slot count and context per slot, after checking it serves ``served``
    (adapter name -> (adapter, server lora id)) as exported."""
    out = []
    with httpx.Client(timeout=10.0, headers=auth_headers(api_key)) as http:
        for url in urls:
            try:
                health = http.get(url + "/health")
                props, loras = (_get_json(http, url, path)
                                for path in ("/props", "/lora-adapters"))
            except httpx.HTTPError as exc:
                raise LlamaServerUnavailableError(
                    f"llama-server at {url} is unreachable ({type(exc).__name__}: {exc}); "
                    "start it (or use LlamaServerBackend.launch), or fix the URL.") from exc
            if health.status_code != 200:
                raise LlamaServerUnavailableError(
                    f"llama-server at {url} is not healthy (HTTP {health.status_code}); "
                    "wait until it has loaded the model, or restart it.")
            slots, n_ctx = checked_claims(url, props)
            if not isinstance(loras, list):
                raise LlamaServerResponseError(
                    f"{url}: /lora-adapters is not what llama-server answers "
                    f"({str(loras)[:120]!r}); check the URL.")
            check_served_adapters(url, loras, served)
            out.append((url, slots, n_ctx))
    return out


def _get_json(http: httpx.Client, url: str, path: str) -> Any:
    response = http.get(url + path)
    if response.status_code == 401:
        raise LlamaServerResponseError(
            f"llama-server at {url} refused GET {path}: HTTP 401 (started with --api-key, and "
            "this backend sent another key or none). Pass the server's key (api_key=KEY).")
    if response.status_code != 200:
        raise LlamaServerResponseError(
            f"{url} answered GET {path} with HTTP {response.status_code}: it is not a "
            "llama-server (or not one built with adapters). Check the URL.")
    try:
        text = response.text
    except UnicodeDecodeError:
        text = ""
    return loads_reply(url, text, f"GET {path}")


def check_served_adapters(url: str, loras: list[Any],
                          served: Mapping[str, tuple[Adapter, int]]) -> None:
    by_id = {e.get("id"): e for e in loras if isinstance(e, dict)}
    for name, (adapter, lora_id) in served.items():
        entry = by_id.get(lora_id)
        if entry is None:
            raise LlamaServerAdapterError(
                f"llama-server at {url} has no adapter with id {lora_id} for {name!r} (it "
                f"serves ids {sorted(by_id, key=str)}). Start it with --lora-scaled "
                f"<{name}.gguf>:0 in that position (LlamaServerBackend.launch does), or fix "
                "the adapters= ids.")
        if entry.get("scale") != 0:
            raise LlamaServerAdapterError(
                f"llama-server at {url} applies adapter {lora_id} ({name!r}) at scale "
                f"{entry.get('scale')} by default, so a request without a lora list would run "
                "it. Start the server with --lora-scaled FILE:0 for every adapter.")
        got = entry.get("alora_invocation_tokens")
        want = exported_invocation(adapter.kind, adapter.invocation_tokens)
        if (got or None) != want:
            raise LlamaServerAdapterError(
                f"llama-server at {url} reports adapter {lora_id} ({name!r}) with aLoRA "
                f"invocation tokens {got}, but {adapter.path}/adapter_config.json means "
                f"{want} (its invocation {list(adapter.invocation_tokens or [])} without the "
                "first token, as export-gguf writes it): the server loaded another file. "
                "Export again with `mellea-local export-gguf` and restart the server.")
