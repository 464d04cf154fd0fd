"""Reading an ``export-gguf`` folder: base file, tokenizer, and the adapters in server order.

The order of ``adapters`` in ``manifest.json`` is the order ``launch`` passes them to
llama-server, so an adapter's index there is its server-side ``lora`` id.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mellea_local.errors import LlamaServerError


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
    root = Path(path).expanduser().resolve()
    file = root / "manifest.json"
    try:
        data: Any = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LlamaServerError(
            f"{file} cannot be read ({exc}); write the folder with `mellea-local export-gguf "
            "MODEL OUT_DIR` first.") from exc
    try:
        adapters, files = [], []
        for i, entry in enumerate(data["adapters"]):
            files.append(root / entry["file"])
            adapters.append(ServedAdapter(
                lora_id=i, folder=root / entry["folder"], intrinsic=entry["intrinsic"],
                name=f"{entry['intrinsic']}_{entry['kind']}"))
        folder = GGUFFolder(root, str(data["model"]), root / data["base"],
                            root / data["tokenizer"], tuple(adapters), tuple(files))
    except (KeyError, TypeError) as exc:
        raise LlamaServerError(
            f"{file} lacks {exc} or is malformed; export the folder again with "
            "`mellea-local export-gguf`.") from exc
    for needed in (folder.base, folder.tokenizer, *folder.adapter_files):
        if not needed.exists():
            raise LlamaServerError(
                f"{needed} is named in {file} but missing; export the folder again.")
    return folder
