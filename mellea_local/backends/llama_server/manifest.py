"""Reading an ``export-gguf`` folder: base file, tokenizer, and the adapters in server order.

The order of ``adapters`` in ``manifest.json`` is the order ``launch`` passes them to
llama-server, so an adapter's index there is its server-side ``lora`` id.

A manifest is data from disk, not trusted: every path it names must be relative and stay
inside the folder after resolving links (a manifest naming ``/etc/...`` or ``../..`` is
refused), and JSON nested deeper than a manifest needs is refused before parsing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mellea_local.errors import LlamaServerError

MAX_MANIFEST_BYTES = 1 << 20


@dataclass(frozen=True)
class ServedAdapter:
    """An adapter a llama-server has loaded: its ``lora`` id there and the folder holding
    its ``adapter_config.json`` and ``io.yaml`` (what the client reads)."""

    lora_id: int
    folder: Path
    intrinsic: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class GGUFFolder:
    root: Path
    model: str
    base: Path
    tokenizer: Path
    adapters: tuple[ServedAdapter, ...]
    adapter_files: tuple[Path, ...]


def read_gguf_folder(path: str | os.PathLike[str]) -> GGUFFolder:
    """The manifest of an ``export-gguf`` folder, with every file it names checked."""
    if not isinstance(path, str | os.PathLike) or not str(path) or "\x00" in str(path):
        raise LlamaServerError(f"gguf_dir={path!r} is not a folder path; pass the folder "
                               "`mellea-local export-gguf MODEL OUT_DIR` wrote.")
    root = Path(path).expanduser().resolve()
    file = root / "manifest.json"
    try:
        if file.stat().st_size > MAX_MANIFEST_BYTES:
            raise LlamaServerError(f"{file} is larger than {MAX_MANIFEST_BYTES} bytes, not a "
                                   "manifest; export the folder again.")
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LlamaServerError(
            f"{file} cannot be read ({exc}); write the folder with `mellea-local export-gguf "
            "MODEL OUT_DIR` first.") from exc
    from mellea_local.backends.llama_server.client import json_depth_ok

    if not json_depth_ok(text):
        raise LlamaServerError(f"{file} nests JSON deeper than a manifest does; export the "
                               "folder again with `mellea-local export-gguf`.")
    try:
        data: Any = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise LlamaServerError(
            f"{file} is not JSON ({exc}); export the folder again with `mellea-local "
            "export-gguf`.") from exc
    try:
        adapters, files = [], []
        for i, entry in enumerate(data["adapters"]):
            files.append(_inside(root, file, entry["file"]))
            intrinsic, kind = entry["intrinsic"], entry["kind"]
            if not isinstance(intrinsic, str) or not isinstance(kind, str):
                raise LlamaServerError(
                    f"{file} is malformed: adapter {i} has intrinsic {intrinsic!r} and kind "
                    f"{kind!r}, not strings; export the folder again with `mellea-local "
                    "export-gguf`.")
            adapters.append(ServedAdapter(
                lora_id=i, folder=_inside(root, file, entry["folder"]), intrinsic=intrinsic,
                name=f"{intrinsic}_{kind}"))
        folder = GGUFFolder(root, str(data["model"]), _inside(root, file, data["base"]),
                            _inside(root, file, data["tokenizer"]), tuple(adapters),
                            tuple(files))
    except (KeyError, TypeError, IndexError) as exc:
        raise LlamaServerError(
            f"{file} lacks {exc} or is malformed; export the folder again with "
            "`mellea-local export-gguf`.") from exc
    for needed in (folder.base, folder.tokenizer, *folder.adapter_files):
        if not needed.exists():
            raise LlamaServerError(
                f"{needed} is named in {file} but missing; export the folder again.")
    return folder


def _inside(root: Path, manifest: Path, name: Any) -> Path:
    """``root / name``, refused unless ``name`` is a relative path that stays in ``root``."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise LlamaServerError(f"{manifest} names a file as {str(name)[:80]!r}, not a relative "
                               "path; export the folder again with `mellea-local export-gguf`.")
    candidate = Path(name)
    resolved = (root / candidate).resolve()
    if candidate.is_absolute() or not resolved.is_relative_to(root):
        raise LlamaServerError(
            f"{manifest} names {name!r}, outside its folder {root}; a manifest may only name "
            "files inside its own folder. Export the folder again (or remove that entry).")
    return resolved
