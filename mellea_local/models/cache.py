"""The model cache: where converted models live, and the manifest that proves one is whole.

A converted folder is published by one atomic rename after its manifest (sha256 and size of
every file) is written, so a folder without a valid manifest was never finished or was changed
since: it is refused, never loaded. Hashing the ~0.5 GB of a 135M model on each load costs
about a second, small beside loading it, and is what turns a flipped byte into an error
instead of a wrong answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mellea_local.errors import ModelIntegrityError

ENV_ROOT = "MELLEA_LOCAL_MODELS"
"""Moves the model cache (default: $XDG_CACHE_HOME/mellea-local/models)."""

MANIFEST = "mellea-local-model.json"
MANIFEST_VERSION = 1


def models_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The model cache: ``root`` if given, else $MELLEA_LOCAL_MODELS, else the XDG cache."""
    if root is not None:
        return Path(root).expanduser()
    if os.environ.get(ENV_ROOT):
        return Path(os.environ[ENV_ROOT]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "mellea-local" / "models"


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def require_sha256(path: Path, expected: str, what: str, fix: str) -> None:
    """Refuse ``path`` unless its sha256 is ``expected``."""
    actual = sha256_file(path)
    if actual != expected:
        raise ModelIntegrityError(
            f"{what} {str(path)!r} has sha256 {actual}, expected {expected}: the file is "
            f"corrupt, truncated or not the pinned release, so it is refused. {fix}"
        )


def write_manifest(folder: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Record every file's size and sha256 (plus ``meta``) in ``folder/MANIFEST``."""
    files = {
        p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST
    }
    manifest = {"version": MANIFEST_VERSION, **meta, "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def verify_converted(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a converted folder, after checking every file it lists; a missing,
    changed or truncated file is a ``ModelIntegrityError`` naming it."""
    folder = Path(folder)
    fix = (f"Delete {str(folder)!r} and load the GGUF again (or rerun `mellea-local models get "
           "NAME --force`) to convert it afresh.")
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        problem = None if manifest.get("version") == MANIFEST_VERSION and isinstance(
            files, dict) else f"version {manifest.get('version')!r}, files {type(files)}"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        problem = str(exc)
    if problem is not None:
        raise ModelIntegrityError(
            f"The converted model {str(folder)!r} has no readable {MANIFEST} ({problem}): the "
            f"conversion never finished or the folder was changed, so it is refused. {fix}"
        )
    for name, entry in files.items():
        path = folder / name
        if not path.is_file():
            raise ModelIntegrityError(f"{str(path)!r} is missing from the converted model. {fix}")
        if path.stat().st_size != entry["bytes"]:
            raise ModelIntegrityError(
                f"{str(path)!r} has {path.stat().st_size} bytes, the manifest says "
                f"{entry['bytes']}: the converted model is corrupt and is refused. {fix}")
        require_sha256(path, entry["sha256"], "Converted file", fix)
    return manifest


def publish(target: Path, build: Callable[[Path], None]) -> Path:
    """Build a folder in a temporary sibling and rename it to ``target`` in one step.

    A kill leaves only a ``.tmp-*`` folder, never a half-written ``target``; when another
    process published ``target`` first, its folder is kept and ours dropped.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; a cache may be shared read-only
    try:
        build(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
