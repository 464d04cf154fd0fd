"""Where a training run writes, and how: never the shipped library by default, no symlink it
did not create, one run per output folder, every file whole or absent.

- The default ``--out`` is the user's own library (``user_adapters_root()``), printed at start
  and end; the shipped library (the repository's ``adapters/`` or the wheel's bundled copy) is
  written only when the caller names it. One step of a run once replaced SmolLM2's two-hour
  aLoRA because ``adapters`` was the default.
- Folders below ``--out`` are made one component at a time and refused when one exists as a
  symlink: a link planted at ``<out>/requirement-check/<base>/alora.saving`` once redirected
  the adapter into the folder it pointed to. Temporary folders come from ``mkdtemp`` (a fresh
  name, never an existing path), and final names are replaced by ``rename``, which replaces a
  directory entry instead of following it.
- ``OutputLock`` is an ``flock`` on ``<kind>.lock`` beside the adapter folder, held for the
  whole run: a second run into the same folder gets ``TrainingLockedError`` naming the holder,
  and the first run's checkpoint is untouched.
- ``write_durable`` writes bytes to a new file and fsyncs it; a full disk (ENOSPC, EDQUOT) is
  ``TrainingDiskFullError`` naming the path, never torch's ``[enforce fail ...]``.
- Nothing is deleted that a run did not write: only the file names training writes
  (``OWN_FILES``) are ever removed, and a folder only once it is empty.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from mellea_local.errors import (
    TrainingDiskFullError,
    TrainingLockedError,
    TrainingOutputError,
)

HOME_ENV = "MELLEA_LOCAL_HOME"
"""Moves the user's adapter library: ``$MELLEA_LOCAL_HOME/adapters``."""

ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json", "io.yaml",
                 "training.json")
"""What training writes into an adapter folder (the report last)."""

DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


def user_adapters_root() -> Path:
    """The default ``--out``: ``$MELLEA_LOCAL_HOME/adapters``, else
    ``$XDG_CACHE_HOME/mellea-local/adapters``, else ``~/.cache/mellea-local/adapters``."""
    home = os.environ.get(HOME_ENV)
    if home:
        return Path(home).expanduser() / "adapters"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "mellea-local" / "adapters"


def shipped_library_roots() -> tuple[Path, ...]:
    from mellea_local.adapters.library import default_library_roots

    return tuple(root.resolve() for root in default_library_roots())


def is_shipped_library(root: Path) -> bool:
    """Whether ``root`` is (or lies inside) a library shipped with the package."""
    try:
        resolved = root.expanduser().resolve()
    except (OSError, RuntimeError):
        return False
    return any(resolved == lib or lib in resolved.parents for lib in shipped_library_roots())


def check_out_root(out_root: str | os.PathLike[str] | None, *, named: bool) -> Path:
    """The output library root, refused when empty, or when it is the shipped library and the
    caller did not name it (``named``: the user passed ``--out`` / ``out_root`` themselves)."""
    if out_root is None:
        root = user_adapters_root()
        if is_shipped_library(root):
            raise TrainingOutputError(
                f"The default --out {root} (from ${HOME_ENV} or the XDG cache) is the adapter "
                "library shipped with mellea-local; training would replace its adapters. Point "
                f"${HOME_ENV} elsewhere, or pass --out.")
        return root
    text = os.fspath(out_root)
    if not text.strip():
        raise TrainingOutputError(
            f"--out {text!r} is empty; it would write into the working folder. Pass a folder "
            f"(or leave --out out for the default {user_adapters_root()}).")
    root = Path(text).expanduser()
    if not named and is_shipped_library(root):
        raise TrainingOutputError(
            f"--out {text!r} is the adapter library shipped with mellea-local; training would "
            "replace its adapters. Pass another --out, or name the shipped library explicitly "
            "to replace them on purpose.")
    return root


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def refuse_link(path: Path, what: str) -> None:
    if _is_link(path):
        raise TrainingOutputError(
            f"{path} ({what}) is a symlink that training did not create (to "
            f"{os.readlink(path)!r}); it would redirect the write. Remove the link or pass "
            "another --out.")


def refuse_foreign(folder: Path, names: tuple[str, ...], what: str) -> None:
    """Refuse a folder training replaces whole (a checkpoint) when it holds anything training
    does not write there: replacing it would carry the user's files off."""
    if not folder.is_dir():
        return
    foreign = sorted(p.name for p in folder.iterdir() if p.name not in names)
    if foreign:
        raise TrainingOutputError(
            f"{folder} ({what}) holds files training did not write ({', '.join(foreign[:5])}); "
            "training replaces that folder whole. Move them elsewhere, or pass another --out.")


def make_folders(root: Path, *parts: str) -> Path:
    """``root/parts...``, made one component at a time; a component that exists as a symlink
    (or a file) is refused. ``root`` itself is the user's to point anywhere."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(exc, root, "create the output folder") from None
    folder = root
    for part in parts:
        folder = folder / part
        refuse_link(folder, "a folder below --out")
        try:
            folder.mkdir(exist_ok=True)
        except FileExistsError:
            raise TrainingOutputError(
                f"{folder} exists and is not a folder; move it away or pass another --out."
            ) from None
        except OSError as exc:
            raise output_error(exc, folder, "create a folder") from None
    return folder


def check_writable(folder: Path) -> None:
    """Prove ``folder`` takes a file (before the first step, not after an hour of training)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".write-test-", dir=folder)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise output_error(exc, folder, "write into the output folder") from None


def output_error(exc: OSError, path: Path, doing: str) -> TrainingOutputError:
    """A typed error for a failed write: disk space named as such, else the OS reason."""
    if exc.errno in DISK_FULL:
        return TrainingDiskFullError(
            f"No disk space left while trying to {doing} at {path} ({exc.strerror}); the last "
            "good checkpoint and any earlier adapter are intact. Free disk space (or pass an "
            "--out on another disk) and rerun the same command to resume.", str(path))
    return TrainingOutputError(
        f"Cannot {doing} at {path}: {exc.strerror or exc}. Pass an --out you can write to.")


def write_durable(folder: Path, name: str, data: bytes, *, final: Path | None = None) -> Path:
    """Write ``data`` to a new file ``folder/name`` (it must not exist: ``folder`` is a fresh
    temporary folder), fsync it; a full disk is ``TrainingDiskFullError`` naming ``final/name``
    (where the file was going; the temporary folder means nothing to a user) or the path."""
    path = folder / name
    shown = (final / name) if final is not None else path
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise output_error(exc, shown, "write") from None
    return path


def _write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data`` to ``fd`` (the one place training's files meet the disk)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fresh_folder(parent: Path, prefix: str) -> Path:
    """A new, empty temporary folder in ``parent`` (``mkdtemp``: never an existing path)."""
    try:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    except OSError as exc:
        raise output_error(exc, parent, "create a temporary folder") from None


def remove_own(folder: Path, names: tuple[str, ...]) -> None:
    """Remove the files training writes (``names``) from ``folder``, then the folder if that
    left it empty; anything else in it is kept. A symlink ``folder`` is left alone."""
    if _is_link(folder) or not folder.is_dir():
        return
    for name in names:
        path = folder / name
        if path.is_file() or _is_link(path):
            path.unlink()
    with contextlib.suppress(OSError):  # not empty: the user's files stay
        folder.rmdir()


class OutputLock:
    """An exclusive ``flock`` on ``<folder>/<name>``, held while the run lives.

    The file holds who holds it (pid, host, start, data) so the refusal can name them. The
    kernel drops the lock when the process dies, so a killed run never blocks the next.
    """

    def __init__(self, folder: Path, name: str, about: dict[str, Any]) -> None:
        self.path = folder / name
        self.about = about
        self._fd: int | None = None

    def __enter__(self) -> OutputLock:
        refuse_link(self.path, "the output folder's lock file")
        while True:
            flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
            try:
                fd = os.open(self.path, flags, 0o644)
            except OSError as exc:
                raise output_error(exc, self.path, "create the lock file") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise TrainingLockedError(
                    f"Another training run is writing to {self.path.parent} ({holder}); two "
                    "runs into one folder would overwrite each other's checkpoint. Wait for it "
                    "to finish, stop it, or pass another --out.", holder) from None
            # The file may have been unlinked by a run finishing between open and flock.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **self.about}
        try:
            os.ftruncate(fd, 0)
            os.write(fd, (json.dumps(info) + "\n").encode())
        except OSError as exc:
            os.close(fd)
            raise output_error(exc, self.path, "write the lock file") from None
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):  # still locked: a waiting run re-checks the inode
            os.unlink(self.path)
        os.close(self._fd)  # releases the flock
        self._fd = None


def _read_holder(fd: int) -> str:
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode("utf-8"))
        return (f"pid {info.get('pid')} on {info.get('host')}, started {info.get('started')}"
                f", data {info.get('data')!r}")
    except (OSError, ValueError, AttributeError):
        return "a run whose lock file cannot be read"
