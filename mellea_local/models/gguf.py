"""A GGUF file -> a plain safetensors model folder, converted once and cached by its sha256.

transformers dequantizes a GGUF into an ordinary model, but the result keeps a GGUF
quantization config (``save_pretrained`` refuses it) and costs ~17 s per load for a 135M model.
So it is converted once: the dequantized state dict is copied into a plain model of the same
architecture (PEFT then sees ordinary ``nn.Linear`` layers, the KV cache ordinary attention),
saved as safetensors with the tokenizer and chat template the GGUF carries, and published with
a manifest under ``<models root>/converted/<sha256[:16]>-<dtype>/<name>/``. The folder is named
after the model (the GGUF's file name up to its first dot) because adapter libraries find
adapters by that name: ``requirement-check/SmolLM2-135M-Instruct/alora``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from mellea_local.errors import GGUFConversionError, ModelIntegrityError
from mellea_local.models.cache import (
    MANIFEST,
    models_root,
    publish,
    remove_stale_builds,
    repair_hint,
    sha256_file,
    verify_converted,
)
from mellea_local.models.gguf_check import check_gguf

CONVERTED_DTYPES = ("float32", "bfloat16")


def find_gguf(path: str | os.PathLike[str]) -> Path | None:
    """The GGUF ``path`` names: the file itself, or the one ``.gguf`` in a folder that is not
    already a model folder (no ``config.json``); None when ``path`` is not about a GGUF."""
    p = Path(path).expanduser()
    if p.is_file():
        return p if p.suffix.lower() == ".gguf" else None
    if not p.is_dir() or (p / "config.json").is_file():
        return None
    found = sorted(q for q in p.iterdir() if q.suffix.lower() == ".gguf" and q.is_file())
    if len(found) > 1:
        raise GGUFConversionError(
            f"{str(p)!r} holds several GGUF files ({', '.join(q.name for q in found)}); pass "
            "the path of the one to load."
        )
    return found[0] if found else None


def model_name_of(gguf: Path) -> str:
    """``SmolLM2-135M-Instruct.Q4_1.gguf`` -> ``SmolLM2-135M-Instruct``."""
    return gguf.name.split(".")[0] or gguf.stem


def converted_dir(sha256: str, name: str, dtype: str,
                  root: str | os.PathLike[str] | None = None) -> Path:
    return models_root(root) / "converted" / f"{sha256[:16]}-{dtype}" / name


def convert_gguf(
    gguf: str | os.PathLike[str],
    *,
    dtype: str = "float32",
    name: str | None = None,
    root: str | os.PathLike[str] | None = None,
    sha256: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The cached plain-safetensors folder of ``gguf``, converting it on first use.

    ``sha256``: the file's hash when the caller has just verified it (saves hashing it twice).
    A cached folder is verified against its manifest before it is returned.
    """
    say = progress or (lambda _msg: None)
    path = Path(gguf).expanduser()
    if not path.is_file():
        raise GGUFConversionError(f"GGUF file {str(path)!r} does not exist; pass a .gguf path.")
    if dtype not in CONVERTED_DTYPES:
        raise GGUFConversionError(
            f"dtype={dtype!r} cannot be a converted model's dtype; use one of "
            f"{', '.join(CONVERTED_DTYPES)} (float32 keeps the dequantized weights exactly).")
    digest = sha256 or sha256_file(path)
    target = converted_dir(digest, name or model_name_of(path), dtype, root)
    for stale in remove_stale_builds(target.parent):
        say(f"removed {stale.name}, left by a conversion that was killed")
    if target.exists():
        check_converted(target, digest)
        return target
    # Refused before anything is written: transformers would read a file of another
    # architecture, or fill missing tensors with random weights, and it would be cached.
    check_gguf(path)
    say(f"converting {path.name} to {dtype} safetensors (once; cached by its sha256)")
    publish(target, lambda tmp: _convert_into(path, tmp, dtype=dtype, sha256=digest,
                                              name=target.name))
    check_converted(target, digest)
    say(f"converted model at {target}")
    return target


def check_converted(folder: Path, digest: str) -> None:
    """Refuse a converted folder whose files changed or that came from another GGUF."""
    manifest = verify_converted(folder)
    recorded = (manifest.get("source") or {}).get("gguf_sha256")
    if recorded != digest:
        raise ModelIntegrityError(
            f"{str(folder / MANIFEST)!r} says it was converted from a GGUF with sha256 "
            f"{recorded}, not {digest}: refused. {repair_hint(folder)}"
        )


def _convert_into(path: Path, out: Path, *, dtype: str, sha256: str, name: str) -> None:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mellea_local.models.cache import write_manifest

    try:
        import gguf  # noqa: F401  (transformers reads GGUF files through it)
    except ImportError:
        raise GGUFConversionError(
            f"Reading {str(path)!r} needs the gguf package: pip install 'gguf>=0.19' (a "
            "dependency of mellea-local; reinstall it if it went missing).") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32)
    except Exception as exc:  # gguf and transformers raise many types for a bad file
        raise GGUFConversionError(
            f"transformers {transformers.__version__} cannot read {str(path)!r} as a GGUF "
            f"model ({type(exc).__name__}: {exc}). Check the file is a complete GGUF of an "
            "architecture transformers supports (llama, mistral, qwen2, ...)."
        ) from exc
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config._name_or_path = name
    torch_dtype = getattr(torch, dtype)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    del loaded
    plain.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    write_manifest(out, {
        "name": name,
        "dtype": dtype,
        "source": {"gguf": path.name, "gguf_sha256": sha256},
        "converter": f"transformers {transformers.__version__}, torch {torch.__version__}",
    })
