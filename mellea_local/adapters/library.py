"""Find an adapter's files and describe them: a local folder, an adapter library, or the hub.

An adapter folder holds ``adapter_config.json``, ``adapter_model.safetensors`` and ``io.yaml``.
An adapter *library* is a tree ``<intrinsic>/<base-model-name>/<lora|alora>/`` of such folders;
the hub repositories of IBM's intrinsics use the same layout. Resolving a source yields a
``ResolvedAdapter``: the checked files, the adapter's kind and its parsed io.yaml. Loading the
weights (through ``peft.PeftModel``) is the backend's job.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path, PurePath
from typing import Any

from mellea_local.adapters.catalog import (
    ADAPTER_KINDS,
    CATALOG,
    catalog_entry,
    require_commit_sha,
    require_intrinsic_name,
)
from mellea_local.adapters.io_config import IOConfig
from mellea_local.errors import AdapterError, AdapterNotFoundError
from mellea_local.inputs import loads_json

ADAPTER_CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
IO_CONFIG_FILE = "io.yaml"

_REPO_LIBRARY = Path(__file__).resolve().parents[2] / "adapters"
_BUNDLED_LIBRARY = Path(__file__).resolve().parent / "bundled"
# A model in the HF cache: .../models--<org>--<name>/snapshots/<commit>
_HF_SNAPSHOT = re.compile(r"models--(?:.+--)?(?P<name>[^/\\]+)[/\\]snapshots[/\\][0-9a-f]{40}$")


class AdapterKind(StrEnum):
    """How an adapter applies its weights (compares equal to the plain strings)."""

    LORA = "lora"
    """Adapts every token: its KV cache differs from the base model's from the first token."""
    ALORA = "alora"
    """Adapts only from its invocation tokens on, so it can reuse the base model's KV cache."""


@dataclass(frozen=True)
class ResolvedAdapter:
    """An adapter folder whose files were found and checked, ready for the backend to load."""

    path: Path = field(metadata={"help": "The adapter folder (absolute)."})
    kind: AdapterKind = field(
        metadata={"help": "aLoRA when adapter_config.json declares alora_invocation_tokens."}
    )
    io_config: IOConfig = field(metadata={"help": "The folder's parsed io.yaml."})
    invocation_tokens: tuple[int, ...] | None = field(
        metadata={"help": "Token ids that switch an aLoRA on; None for a plain LoRA."}
    )
    base_model_name_or_path: str | None = field(
        metadata={"help": "The base model the adapter was trained on, per adapter_config.json."}
    )
    intrinsic: str | None = field(
        default=None, metadata={"help": "The intrinsic name it was resolved by, if any."}
    )

    @property
    def config_path(self) -> Path:
        return self.path / ADAPTER_CONFIG_FILE

    @property
    def weights_path(self) -> Path:
        return self.path / WEIGHTS_FILE


@dataclass(frozen=True)
class HubSource:
    """An intrinsic in a hub repository laid out as a library, read at a pinned commit."""

    repo_id: str = field(metadata={"help": "Hub repository, e.g. ibm-granite/granitelib-core."})
    revision: str = field(metadata={"help": "Full 40-hex commit SHA; branches are refused."})
    intrinsic: str = field(metadata={"help": "Top-level folder of the intrinsic in the repo."})

    def __post_init__(self) -> None:
        if not isinstance(self.repo_id, str) or self.repo_id.count("/") != 1:
            raise AdapterError(
                f"Hub repo id {self.repo_id!r} must look like 'owner/name'."
            )
        require_commit_sha(self.revision, what=f"HubSource for {self.repo_id}")
        require_intrinsic_name(self.intrinsic)

    @classmethod
    def from_catalog(cls, intrinsic: str) -> HubSource:
        """The pinned hub location the catalog gives for ``intrinsic``."""
        entry = catalog_entry(intrinsic)
        return cls(repo_id=entry.repo_id, revision=entry.revision, intrinsic=entry.name)


AdapterSource = str | os.PathLike[str] | HubSource
"""An adapter folder (a path), an intrinsic name (``"requirement-check"``) or a ``HubSource``."""


def base_model_name(model_id_or_path: str | os.PathLike[str]) -> str:
    """The folder name a library uses for a base model.

    ``ibm-granite/granite-4.1-3b`` -> ``granite-4.1-3b``; a local path -> its last folder; a
    snapshot in the HF cache (``.../models--org--name/snapshots/<sha>``) -> ``name``, since the
    commit hash would match no library folder.
    """
    text = os.fspath(model_id_or_path).rstrip("/\\")
    snapshot = _HF_SNAPSHOT.search(text)
    name = snapshot.group("name") if snapshot else PurePath(text).name
    if not name or name in {".", ".."}:
        raise AdapterError(
            f"Cannot derive a base model name from {os.fspath(model_id_or_path)!r}; pass a hub "
            "id such as 'ibm-granite/granite-4.1-3b' or a model folder path."
        )
    return name


def default_library_roots() -> tuple[Path, ...]:
    """The libraries searched when none are given: the repo's ``adapters/`` folder (in a
    source checkout) and the copy bundled in the installed package, whichever exist."""
    return tuple(root for root in (_REPO_LIBRARY, _BUNDLED_LIBRARY) if root.is_dir())


def library_subpath(intrinsic: str, base_model: str | os.PathLike[str], kind: str) -> str:
    """``<intrinsic>/<base-model-name>/<kind>``, the folder of one adapter in a library."""
    return f"{require_intrinsic_name(intrinsic)}/{base_model_name(base_model)}/{_kind(kind)}"


def read_adapter_folder(
    path: str | os.PathLike[str], *, intrinsic: str | None = None,
    expected_kind: str | None = None,
) -> ResolvedAdapter:
    """Check an adapter folder's files and describe it.

    ``expected_kind`` is the kind the folder's place in a library claims; an
    ``adapter_config.json`` that disagrees (an ``alora/`` folder without invocation tokens)
    is refused rather than loaded as the other kind.
    """
    try:
        folder = Path(path).expanduser().resolve()
        is_dir = folder.is_dir()
    except (OSError, RuntimeError) as exc:  # a symlink loop: RuntimeError before Python 3.13
        raise AdapterError(
            f"Adapter folder {os.fspath(path)!r} cannot be opened ({exc}); a symlink loop or "
            "an unreadable path. Point it at a real folder holding the adapter's files."
        ) from None
    if expected_kind is None and folder.name in ADAPTER_KINDS:
        # Its place claims a kind (``<intrinsic>/<base>/alora``), whoever names the folder:
        # an alora/ folder without invocation tokens would load as a LoRA that adapts every
        # token, the failure the peer shipped twice.
        expected_kind = folder.name
    if not is_dir:
        raise AdapterNotFoundError(
            f"Adapter folder {folder} does not exist. Pass a folder holding "
            f"{ADAPTER_CONFIG_FILE}, {WEIGHTS_FILE} and {IO_CONFIG_FILE}, or an intrinsic name "
            "such as 'requirement-check'."
        )
    missing = [f for f in (ADAPTER_CONFIG_FILE, WEIGHTS_FILE, IO_CONFIG_FILE)
               if not (folder / f).is_file()]
    if missing:
        hint = ""
        if WEIGHTS_FILE in missing and (folder / "adapter_model.bin").exists():
            hint = (" It has adapter_model.bin: pickled weights are refused because loading "
                    "them can run code; convert them to safetensors.")
        raise AdapterError(
            f"Adapter folder {folder} lacks {missing}.{hint} An adapter folder holds "
            f"{ADAPTER_CONFIG_FILE} and {WEIGHTS_FILE} (as PeftModel.save_pretrained writes "
            f"them) and the intrinsic's {IO_CONFIG_FILE}; add the missing files."
        )
    config = _read_adapter_config(folder / ADAPTER_CONFIG_FILE)
    tokens = _invocation_tokens(config, folder / ADAPTER_CONFIG_FILE)
    kind = AdapterKind.ALORA if tokens is not None else AdapterKind.LORA
    if expected_kind is not None and kind != _kind(expected_kind):
        raise AdapterError(
            f"{folder} sits in a '{expected_kind}' folder but its {ADAPTER_CONFIG_FILE} "
            f"describes a {kind.value} adapter ("
            + ("it declares" if tokens else "no")
            + " alora_invocation_tokens). Move it to the matching folder, or fix the config"
            + ("." if tokens else ": add the invocation's token ids as alora_invocation_tokens.")
        )
    base = config.get("base_model_name_or_path")
    if base is not None and not isinstance(base, str):
        raise AdapterError(
            f"{folder / ADAPTER_CONFIG_FILE}: base_model_name_or_path must be a string, not "
            f"{base!r}."
        )
    return ResolvedAdapter(
        path=folder, kind=kind, io_config=IOConfig.load(folder / IO_CONFIG_FILE),
        invocation_tokens=tokens, base_model_name_or_path=base, intrinsic=intrinsic,
    )


def find_in_library(
    intrinsic: str, base_model: str | os.PathLike[str], *,
    roots: Sequence[str | os.PathLike[str]] | None = None, kinds: Sequence[str] = ADAPTER_KINDS,
) -> ResolvedAdapter | None:
    """The adapter for ``intrinsic`` on ``base_model`` in the first root that has one.

    Roots are searched in order and, within a root, ``kinds`` in order (aLoRA first by
    default). A root is one coherent library, so a LoRA in an earlier root wins over an aLoRA
    in a later one; pass ``kinds=("alora",)`` to insist on an aLoRA. A folder that exists but
    is broken raises instead of falling through to the next candidate.
    """
    require_intrinsic_name(intrinsic)
    base = base_model_name(base_model)
    for root in _roots(roots):
        for kind in kinds:
            folder = root / intrinsic / base / _kind(kind)
            if folder.is_dir():
                return read_adapter_folder(folder, intrinsic=intrinsic, expected_kind=kind)
    return None


def fetch_from_hub(
    source: HubSource, base_model: str | os.PathLike[str], *,
    kinds: Sequence[str] = ADAPTER_KINDS, cache_dir: str | os.PathLike[str] | None = None,
) -> ResolvedAdapter:
    """Download (or find in the HF cache) the adapter of ``source`` for ``base_model``.

    Only ``<intrinsic>/<base>/<kind>/*`` is fetched, at the pinned commit. With
    ``HF_HUB_OFFLINE=1`` nothing is downloaded: a cache miss fails at once with the command
    that fetches the files.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    base = base_model_name(base_model)
    offline = _hub_offline()
    where = f"{source.repo_id}@{source.revision}"
    misses: list[str] = []
    for kind in kinds:
        sub = library_subpath(source.intrinsic, base, kind)
        try:
            snapshot = snapshot_download(
                source.repo_id, revision=source.revision, allow_patterns=[f"{sub}/*"],
                cache_dir=cache_dir, local_files_only=offline,
            )
        except LocalEntryNotFoundError as exc:
            misses.append(f"{sub} ({exc.__class__.__name__})")
            continue
        except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
            raise AdapterNotFoundError(
                f"{where} cannot be read from the hub ({exc.__class__.__name__}); check the "
                "repo id and the pinned commit, and log in if the repo is gated."
            ) from exc
        except HfHubHTTPError as exc:
            raise AdapterError(f"Downloading {sub} from {where} failed: {exc}") from exc
        folder = Path(snapshot) / sub
        if folder.is_dir():
            return read_adapter_folder(folder, intrinsic=source.intrinsic, expected_kind=kind)
        misses.append(f"{sub} (not in the repo at that commit)")
    wanted = library_subpath(source.intrinsic, base, kinds[0]) if kinds else source.intrinsic
    how = (
        f"HF_HUB_OFFLINE=1 forbids downloading; fetch it once with network access: "
        f"`hf download {source.repo_id} --revision {source.revision} --include '{wanted}/*'`"
        if offline else "the hub does not have it (or could not be reached)"
    )
    raise AdapterNotFoundError(
        f"No adapter for intrinsic {source.intrinsic!r} on base model {base!r} in the local "
        f"Hugging Face cache of {where}; tried {misses}. {how}. Or pass a local adapter folder."
    )


def resolve_adapter(
    source: AdapterSource, *, base_model: str | os.PathLike[str] | None = None,
    roots: Sequence[str | os.PathLike[str]] | None = None, kinds: Sequence[str] = ADAPTER_KINDS,
    allow_hub: bool = True, cache_dir: str | os.PathLike[str] | None = None,
) -> ResolvedAdapter:
    """Turn an adapter source into a checked ``ResolvedAdapter``.

    - a ``HubSource``: fetched at its pinned commit;
    - a path (an ``os.PathLike``, or a string with a path separator or starting with ``.``,
      ``~`` or a drive): that folder;
    - any other string: an intrinsic name, looked up in ``roots`` (default:
      ``default_library_roots()``) for ``base_model``, preferring ``kinds`` in order; if no
      library has it and the catalog does, fetched from the catalog's pinned hub commit
      (``allow_hub=False`` keeps resolution local).
    """
    if isinstance(source, HubSource):
        return fetch_from_hub(source, _need_base(base_model, source.intrinsic), kinds=kinds,
                              cache_dir=cache_dir)
    if isinstance(source, os.PathLike) or _looks_like_path(source):
        return read_adapter_folder(source)
    if not isinstance(source, str):
        raise AdapterError(
            f"An adapter source is a folder path, an intrinsic name or a HubSource, not "
            f"{type(source).__name__} ({source!r}); pass e.g. 'requirement-check', "
            "Path('my/adapter') or HubSource(...)."
        )
    intrinsic = require_intrinsic_name(source)
    base = _need_base(base_model, intrinsic)
    found = find_in_library(intrinsic, base, roots=roots, kinds=kinds)
    if found is not None:
        return found
    searched = _describe_roots(intrinsic, _roots(roots))
    if allow_hub and intrinsic in CATALOG:
        try:
            return fetch_from_hub(HubSource.from_catalog(intrinsic), base, kinds=kinds,
                                  cache_dir=cache_dir)
        except AdapterNotFoundError as exc:
            raise AdapterNotFoundError(f"Not in the local libraries ({searched}). {exc}") from exc
    raise AdapterNotFoundError(
        f"No {'/'.join(kinds)} adapter for intrinsic {intrinsic!r} on base model "
        f"{base_model_name(base)!r} in the libraries searched ({searched}). Add one as "
        f"<root>/{intrinsic}/{base_model_name(base)}/<alora|lora>/, pass a folder, or pass "
        "roots=[...]."
    )


# --------------------------------------------------------------------------------------------
# Helpers


def _kind(kind: str) -> str:
    if kind not in ADAPTER_KINDS:
        raise AdapterError(f"Adapter kind {kind!r} is not one of {list(ADAPTER_KINDS)}.")
    return str(kind)


def _roots(roots: Sequence[str | os.PathLike[str]] | None) -> list[Path]:
    if roots is None:
        return list(default_library_roots())
    if isinstance(roots, str | bytes | os.PathLike) or not isinstance(roots, Sequence) or any(
            not isinstance(root, str | os.PathLike) for root in roots):
        raise AdapterError(
            f"roots={roots!r} must be a list of library folders, e.g. roots=['adapters'] "
            "(a single path goes in a list too)."
        )
    return [Path(root).expanduser() for root in roots]


def _need_base(base_model: str | os.PathLike[str] | None, intrinsic: str) -> str:
    if not isinstance(base_model, str | os.PathLike):
        raise AdapterError(
            f"Resolving intrinsic {intrinsic!r} needs base_model (the model id or path the "
            "adapter must fit), since libraries hold one adapter per base model; got "
            f"{base_model!r}. Pass e.g. base_model='ibm-granite/granite-4.1-3b'."
        )
    return os.fspath(base_model)


def _looks_like_path(source: Any) -> bool:
    if not isinstance(source, str):
        return False
    return ("/" in source or "\\" in source or source.startswith((".", "~"))
            or os.path.isabs(source))


def _hub_offline() -> bool:
    """Offline per huggingface_hub or the environment now (the constant is read at import)."""
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return bool(constants.HF_HUB_OFFLINE) or flag in {"1", "ON", "YES", "TRUE"}


def _describe_roots(intrinsic: str, roots: list[Path]) -> str:
    if not roots:
        return "no library roots exist"
    parts = []
    for root in roots:
        folder = root / intrinsic
        bases = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        parts.append(f"{root}: " + (f"base models {bases}" if bases else f"no {intrinsic}/"))
    return "; ".join(parts)


def _read_adapter_config(path: Path) -> dict[str, Any]:
    try:
        config = loads_json(path.read_bytes(), "the adapter config")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterError(
            f"{path} cannot be read as JSON ({exc}); fix the file or save the adapter again "
            "with PeftModel.save_pretrained."
        ) from exc
    if not isinstance(config, dict):
        raise AdapterError(f"{path} must hold a JSON object, not {type(config).__name__}.")
    peft_type = config.get("peft_type")
    if peft_type is not None and peft_type != "LORA":
        raise AdapterError(
            f"{path} declares peft_type {peft_type!r}; only LoRA and aLoRA adapters "
            "(peft_type 'LORA') are supported."
        )
    return config


def _invocation_tokens(config: dict[str, Any], path: Path) -> tuple[int, ...] | None:
    raw = config.get("alora_invocation_tokens")
    if raw is None:
        return None
    if (not isinstance(raw, list) or not raw
            or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in raw)):
        raise AdapterError(
            f"{path}: alora_invocation_tokens must be a non-empty list of token ids, not "
            f"{raw!r}. Build it with tokenizer.encode(invocation, add_special_tokens=False)."
        )
    return tuple(raw)
