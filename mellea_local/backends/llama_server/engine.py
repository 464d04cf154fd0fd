"""``LlamaServerEngine``: the llama-server fleet as a ``ServingEngine``.

The adapters a llama-server runs are fixed when it starts (the export folder's manifest gives
each its ``lora`` id), so "loading" an admitted adapter here means finding the server-side id
of its folder and checking that its invocation has a GGUF spelling; the admission rules
themselves (``check_supported``, tokenizer fit, names) are ``ServingBackend.admit_adapter``'s,
the same as ``LocalHFBackend``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mellea_local.adapters import ResolvedAdapter
from mellea_local.backends.llama_server.gguf_export import exported_invocation
from mellea_local.backends.llama_server.manifest import ServedAdapter
from mellea_local.errors import AdapterError

if TYPE_CHECKING:
    from mellea_local.backends.llama_server.routing import Fleet

__all__ = ["LlamaServerEngine"]


class LlamaServerEngine:
    """The servers (``fleet``) and which ``lora`` id serves each admitted adapter."""

    mixed_adapters = False
    """A llama-server request states one adapter set: no mixed-adapter forward."""

    def __init__(self, served: Sequence[ServedAdapter]) -> None:
        self._by_folder = {Path(s.folder).resolve(): s.lora_id for s in served}
        self.lora_ids: dict[str, int] = {}
        """Server-side ``lora`` id by adapter name, for every admitted adapter."""
        self.fleet: Fleet | None = None
        """The servers and their slots, once connected (``routing.Fleet``)."""

    def load_adapter(self, resolved: ResolvedAdapter, name: str) -> None:
        lora_id = self._by_folder.get(resolved.path)
        if lora_id is None:
            raise AdapterError(
                f"{resolved.path} is not served by these llama-servers: a server loads its "
                "adapters at start. Put it in an adapter library for the base, export again "
                "(`mellea-local export-gguf MODEL OUT_DIR`) and launch or connect to that."
            )
        exported_invocation(resolved.kind, resolved.invocation_tokens)  # refuses one token
        self.lora_ids[name] = lora_id

    def unload_adapter(self, name: str) -> None:
        """Stop using ``name`` (the server keeps its weights, at scale 0, until it stops)."""
        self.lora_ids.pop(name, None)
