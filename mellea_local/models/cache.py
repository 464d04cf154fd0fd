"""The model cache: where converted models live, and the manifest that proves one is whole.

A converted folder is published by one atomic rename after its manifest (sha256 and size of
every file) is written, so a folder without a valid manifest was never finished or was changed
since: it is refused, never loaded. Hashing the ~0.5 GB of a 135M model on each load costs
about a second, small beside loading it, and is what turns a flipped byte into an error
instead of a wrong answer.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import time
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


CONVERTED = "converted"
_ENTRY = re.compile(r"[0-9a-f]{16}-[a-z0-9]+")


def in_cache_layout(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` sits where conversions are published
    (``.../converted/<sha256[:16]>-<dtype>/<name>``), wherever the cache is."""
    folder = Path(folder).expanduser().absolute()
    return folder.parent.parent.name == CONVERTED and bool(_ENTRY.fullmatch(folder.parent.name))


def is_converted(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` claims to be a conversion (it has a manifest) or sits where one is
    published: either way it is loaded only after ``verify_converted``. A conversion whose
    manifest was deleted is still one, so it is refused, never loaded unchecked."""
    folder = Path(folder).expanduser()
    return folder.is_dir() and ((folder / MANIFEST).exists() or in_cache_layout(folder))


def repair_hint(folder: Path) -> str:
    return (f"Run `mellea-local models get NAME` for a registered model (it reconverts a "
            f"damaged folder), or delete {str(folder)!r} and load the GGUF again to convert it "
            "afresh.")


def verify_converted(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a converted folder, after checking every file it lists and that it
    holds nothing else; a missing, changed, truncated or unlisted file is a
    ``ModelIntegrityError`` naming it.

    Unlisted files are refused because loading reads whatever the folder holds: an
    ``adapter_config.json`` and weights dropped in would be applied to the model.
    """
    folder = Path(folder)
    fix = repair_hint(folder)
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
    unlisted = sorted(p.name for p in folder.iterdir() if p.name != MANIFEST
                      and p.name not in files)
    if unlisted:
        raise ModelIntegrityError(
            f"The converted model {str(folder)!r} holds {len(unlisted)} file(s) its manifest "
            f"does not list ({', '.join(unlisted[:5])}): they would be loaded with the model "
            f"(an adapter_config.json would apply its adapter), so the folder is refused. "
            f"Remove them, or: {fix}")
    for name, entry in files.items():
        path = folder / name
        if path.is_symlink() or not path.is_file():
            raise ModelIntegrityError(
                f"{str(path)!r} is missing from the converted model (or is not a plain file). "
                f"{fix}")
        if path.stat().st_size != entry["bytes"]:
            raise ModelIntegrityError(
                f"{str(path)!r} has {path.stat().st_size} bytes, the manifest says "
                f"{entry['bytes']}: the converted model is corrupt and is refused. {fix}")
        require_sha256(path, entry["sha256"], "Converted file", fix)
    return manifest


TMP_PREFIX = ".tmp-"
ORPHAN_LOCK_S = 60.0


def _age_s(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def remove_stale_builds(parent: Path) -> list[Path]:
    """Remove the ``.tmp-*`` folders that killed conversions left in ``parent``; returns them.

    Each build holds an exclusive ``flock`` on ``<its folder>.lock`` while it runs, so a folder
    whose lock can be taken (or that has no lock file: an older build's) has no live owner;
    a build still running in another process keeps its lock and is left alone.
    """
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    for entry in sorted(parent.iterdir()):
        if not entry.name.startswith(TMP_PREFIX) or entry.name.endswith(".lock"):
            continue
        lock = entry.with_name(entry.name + ".lock")
        with _try_lock(lock) as held:
            if not held:
                continue
            shutil.rmtree(entry, ignore_errors=True)
            if not entry.exists():
                removed.append(entry)
            lock.unlink(missing_ok=True)
    for lock in parent.glob(TMP_PREFIX + "*.lock"):  # locks whose folder is gone
        # A build creates its lock just before its folder: only an old lock is an orphan.
        if (not lock.with_name(lock.name.removesuffix(".lock")).exists()
                and _age_s(lock) > ORPHAN_LOCK_S):
            with _try_lock(lock) as held:
                if held:
                    lock.unlink(missing_ok=True)
    return removed


@contextlib.contextmanager
def _try_lock(lock: Path) -> Any:
    """Yields True when ``lock`` is free (or absent) and now held by us, else False."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        yield True
        return
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def publish(target: Path, build: Callable[[Path], None]) -> Path:
    """Build a folder in a temporary sibling and rename it to ``target`` in one step.

    A kill leaves only a ``.tmp-*`` folder, never a half-written ``target``, and the next
    publish in that place removes it (``remove_stale_builds``); when another process
    published ``target`` first, its folder is kept and ours dropped.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(target.parent)
    tmp = target.parent / f"{TMP_PREFIX}{target.name}-{secrets.token_hex(6)}"
    lock = tmp.with_name(tmp.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        tmp.mkdir(mode=0o755)
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
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)
    return target
