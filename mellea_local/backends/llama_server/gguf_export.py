"""``mellea-local export-gguf``: a base model and its adapter library as GGUF for llama-server.

Written with the ``gguf`` package directly, not llama.cpp's ``convert_hf_to_gguf.py``: that
script refuses the embedded model's custom BPE pre-tokenizer, and we send token ids anyway, so
the server's tokenizer only has to load (a byte-level ``gpt2`` vocabulary with our merges, the
same ids, BOS/EOS/PAD as in our tokenizer). What must be exact is the arithmetic:

- **Base** (Llama architecture, f32): tensors renamed as llama.cpp names them; ``q_proj`` and
  ``k_proj`` rows permuted from Hugging Face's half-split RoPE layout to llama.cpp's
  interleaved one (``permute`` below, as ``convert_hf_to_gguf.py`` does); tied embeddings stay
  tied (no ``output.weight``: llama.cpp then reuses ``token_embd``).
- **Adapters**: PEFT's ``lora_A`` ``[r, in]`` and ``lora_B`` ``[out, r]`` are already the
  layout llama.cpp expects (ggml reverses the numpy shape: ``a.ne = [in, r]``,
  ``b.ne = [r, out]``); ``lora_B`` of q/k gets the same row permutation as the base weight it
  adds to; ``adapter.lora.alpha`` is PEFT's ``lora_alpha``, and llama.cpp scales by
  ``alpha / r`` exactly as PEFT does (rsLoRA and per-module ``alpha_pattern``/``rank_pattern``
  are refused: llama.cpp has one alpha per file).
- **aLoRA invocation**: llama.cpp's server applies an aLoRA from one token *before* the last
  occurrence of ``adapter.alora.invocation_tokens`` (``server-context.cpp``: the pre-invocation
  batch stops at ``alora_invocation_start - 1``), while PEFT applies it from the invocation's
  first token. Writing the invocation without its first token makes the server start the
  adapter exactly where PEFT does (the same convention ``convert_lora_to_gguf.py`` uses for an
  ``invocation_string``). The manifest records both; the backend checks the server reports the
  written ones and refuses prompts where the shortened run would be found elsewhere. Measured
  on the embedded aLoRA over the six check families: shifted, scores match PEFT to ~2e-5;
  unshifted, to 1.2e-3 (its token before the invocation is a role header, so the damage is
  small here; an adapter whose invocation follows content would fare worse).

Outputs are written without following links: each file goes to a fresh temporary name made
with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and is then renamed over its final name (a rename
replaces a link planted there instead of writing through it); a link planted at an output
name or output folder is refused (issue 34: the victim of such a link was overwritten with
GGUF bytes).

A base GGUF as shipped (``base_gguf=``, e.g. the Q4_1 file a registered model was converted
from) is copied in place of the f32 base, after checking it is that model: llama architecture,
the config's shapes, and the very token list our tokenizer has (we send ids). It must come
from llama.cpp's converter, whose q/k rows are in the interleaved order the adapters' ``lora_B``
are permuted to. Quantized weights move scores: llama.cpp multiplies Q4_1/Q8_0 weights by
activations it first rounds to 8 bits, so a quantized base is measured against PEFT on its own
tolerance (benchmarks/results/llama_server_smollm2.json), not the f32 one.

The manifest (``manifest.json``) names the base file, the tokenizer folder and each adapter's
intrinsic, kind, file, io.yaml and invocation tokens, so ``LlamaServerBackend.launch`` needs
only the folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mellea_local.adapters import AdapterKind, ResolvedAdapter, read_adapter_folder
from mellea_local.adapters.kinds import strategy_for
from mellea_local.errors import GGUFExportError

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
BASE_FILE = "base-f32.gguf"
TOKENIZER_DIR = "tokenizer"
ARCH = "llama"

_TOKEN_NORMAL, _TOKEN_CONTROL, _TOKEN_USER_DEFINED = 1, 3, 4
_LAYER_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "chat_template.jinja", "config.json", "generation_config.json")


def permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of a q/k projection from HF's rotate-half RoPE order to llama.cpp's interleaved one."""
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def gguf_tensor_name(hf_name: str) -> str | None:
    """llama.cpp's name for a Hugging Face Llama tensor (without the ``.weight``), or None."""
    name = hf_name.removeprefix("model.")
    if name == "embed_tokens":
        return "token_embd"
    if name == "norm":
        return "output_norm"
    if name == "lm_head":
        return "output"
    if name.startswith("layers."):
        _, block, rest = name.split(".", 2)
        short = _LAYER_NAMES.get(rest)
        return f"blk.{int(block)}.{short}" if short else None
    return None


def _check_config(config: dict[str, Any], path: Path) -> None:
    if config.get("model_type") != "llama":
        raise GGUFExportError(
            f"{path} is a {config.get('model_type')!r} model; export-gguf writes the Llama "
            "architecture only. Convert other models with llama.cpp's convert_hf_to_gguf.py."
        )
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if rope.get("rope_type", "default") != "default":
        raise GGUFExportError(
            f"{path} uses RoPE scaling {rope.get('rope_type')!r}, which this exporter does not "
            "write; use llama.cpp's convert_hf_to_gguf.py for it."
        )


def _rope_theta(config: dict[str, Any]) -> float:
    rope = config.get("rope_parameters") or {}
    return float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))


def _vocab(tokenizer: Any) -> tuple[list[str], list[int], list[str]]:
    """Tokens by id (byte-level spelling), their types and the BPE merges."""
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    model = data["model"]
    if model.get("type") != "BPE":
        raise GGUFExportError(
            f"The tokenizer is {model.get('type')!r}, not byte-level BPE; export-gguf writes "
            "gpt2-style vocabularies only."
        )
    size = len(tokenizer)
    tokens = [""] * size
    types = [_TOKEN_NORMAL] * size
    for token, i in model["vocab"].items():
        tokens[i] = token
    for added in data.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = _TOKEN_CONTROL if added.get("special") else _TOKEN_USER_DEFINED
    missing = [i for i, t in enumerate(tokens) if not t]
    if missing:
        raise GGUFExportError(f"Token ids {missing[:5]} have no text in the tokenizer.")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types, merges


def write_base(model_dir: Path, out: Path) -> dict[str, Any]:
    """The base model at ``model_dir`` as an f32 GGUF at ``out``; returns its hyperparameters."""
    import gguf
    from safetensors import safe_open
    from transformers import AutoTokenizer

    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    _check_config(config, model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // n_head
    writer = gguf.GGUFWriter(str(out), ARCH)  # out: a fresh file from _written
    writer.add_name(model_dir.name)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens, types, merges = _vocab(tokenizer)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for add, value in ((writer.add_bos_token_id, tokenizer.bos_token_id),
                       (writer.add_eos_token_id, tokenizer.eos_token_id),
                       (writer.add_pad_token_id, tokenizer.pad_token_id)):
        if value is not None:
            add(int(value))
    writer.add_add_bos_token(False)  # our prompts carry every control token themselves
    writer.add_add_eos_token(False)
    with safe_open(str(model_dir / "model.safetensors"), framework="np") as f:
        for key in sorted(f.keys()):
            stem = key.removesuffix(".weight")
            name = gguf_tensor_name(stem)
            if name is None:
                raise GGUFExportError(f"{model_dir}: tensor {key} has no llama.cpp counterpart.")
            data = f.get_tensor(key).astype(np.float32)
            if stem.endswith("q_proj"):
                data = permute(data, n_head)
            elif stem.endswith("k_proj"):
                data = permute(data, n_kv)
            writer.add_tensor(f"{name}.weight", np.ascontiguousarray(data))
    _finish(writer)
    return _hparams(config, len(tokens))


def _hparams(config: dict[str, Any], n_vocab: int) -> dict[str, Any]:
    return {"n_head": config["num_attention_heads"], "n_head_kv": config["num_key_value_heads"],
            "n_vocab": n_vocab, "n_ctx_train": config["max_position_embeddings"]}


def check_base_gguf(model_dir: Path, gguf_file: Path) -> dict[str, Any]:
    """The hyperparameters of ``model_dir`` once ``gguf_file`` is shown to be the same model
    (architecture, shapes, token list); ``GGUFExportError`` naming the first mismatch."""
    import gguf
    from transformers import AutoTokenizer

    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    _check_config(config, model_dir)
    if not gguf_file.is_file():
        raise GGUFExportError(f"base_gguf {gguf_file} is not a file; pass the .gguf the model "
                              "folder was converted from (`mellea-local models path NAME`).")
    try:
        fields = gguf.GGUFReader(str(gguf_file)).fields
    except Exception as exc:  # not a GGUF: the reader raises a bare ValueError
        raise GGUFExportError(f"base_gguf {gguf_file} cannot be read as GGUF ({exc}).") from exc

    def field(key: str) -> Any:
        return fields[key].contents() if key in fields else None

    arch = field("general.architecture")
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    wanted = {"general.architecture": ARCH,
              f"{ARCH}.block_count": config["num_hidden_layers"],
              f"{ARCH}.embedding_length": config["hidden_size"],
              f"{ARCH}.feed_forward_length": config["intermediate_size"],
              f"{ARCH}.attention.head_count": config["num_attention_heads"],
              f"{ARCH}.attention.head_count_kv": config["num_key_value_heads"],
              f"{ARCH}.rope.dimension_count": head_dim}
    for key, value in wanted.items():
        if field(key) != value:
            raise GGUFExportError(
                f"base_gguf {gguf_file} has {key}={field(key)!r} (architecture {arch!r}) but "
                f"{model_dir / 'config.json'} says {value!r}: it is not this model. Pass the "
                "GGUF the folder was converted from, or omit base_gguf to write an f32 base.")
    tokens, _, _ = _vocab(AutoTokenizer.from_pretrained(str(model_dir)))
    theirs = field("tokenizer.ggml.tokens")
    if theirs != tokens:
        first = next((i for i, (a, b) in enumerate(zip(tokens, theirs or [], strict=False))
                      if a != b), min(len(tokens), len(theirs or [])))
        raise GGUFExportError(
            f"base_gguf {gguf_file} has {len(theirs or [])} tokens and our tokenizer "
            f"{len(tokens)}, differing from id {first}: the server would read our token ids "
            "as other tokens. Pass the GGUF the folder was converted from.")
    return _hparams(config, len(tokens))


def _finish(writer: Any) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def gguf_invocation(invocation: tuple[int, ...]) -> tuple[int, ...]:
    """What to write as ``adapter.alora.invocation_tokens`` so llama-server starts the adapter
    where PEFT does (the module docstring explains the shift)."""
    if len(invocation) < 2:
        raise GGUFExportError(
            f"aLoRA invocation {list(invocation)} has a single token: llama-server would start "
            "the adapter one token earlier than PEFT and no GGUF spelling fixes that. Export "
            "and serve the intrinsic's plain LoRA instead."
        )
    return invocation[1:]


def exported_invocation(kind: AdapterKind, invocation: Sequence[int] | None) -> list[int] | None:
    """The ``adapter.alora.invocation_tokens`` an adapter of ``kind`` is exported with (and a
    server must report), or None for a kind the server runs on every token; refuses what no
    GGUF spelling serves (``gguf_invocation``)."""
    told = strategy_for(kind).engine_invocation(invocation)
    return None if told is None else list(gguf_invocation(tuple(told)))


def write_adapter(resolved: ResolvedAdapter, hparams: dict[str, Any], out: Path) -> None:
    """One PEFT adapter folder as a llama.cpp LoRA GGUF at ``out``."""
    import gguf
    from safetensors import safe_open

    config = json.loads(resolved.config_path.read_text(encoding="utf-8"))
    for key in ("alpha_pattern", "rank_pattern"):
        if config.get(key):
            raise GGUFExportError(
                f"{resolved.config_path} sets {key}; llama.cpp has one alpha and rank per "
                "adapter file. Retrain without per-module patterns to serve it on llama-server."
            )
    if config.get("use_rslora"):
        raise GGUFExportError(
            f"{resolved.config_path} uses rsLoRA (alpha/sqrt(r)); llama.cpp scales by alpha/r. "
            "Serve it with LocalHFBackend."
        )
    writer = gguf.GGUFWriter(str(out), ARCH)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(config["lora_alpha"]))
    invocation = exported_invocation(resolved.kind, resolved.invocation_tokens)
    if invocation is not None:
        writer.add_key_value(gguf.Keys.Adapter.ALORA_INVOCATION_TOKENS, invocation,
                             gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT32)
    with safe_open(str(resolved.weights_path), framework="np") as f:
        for key in sorted(f.keys()):
            for name, data in _lora_tensor(key, f.get_tensor(key), hparams, resolved):
                writer.add_tensor(name, np.ascontiguousarray(data.astype(np.float32)))
    _finish(writer)


def _lora_tensor(key: str, data: np.ndarray, hparams: dict[str, Any],
                 resolved: ResolvedAdapter) -> Iterator[tuple[str, np.ndarray]]:
    if ".lora_A." in key or ".lora_B." in key:
        is_a = ".lora_A." in key
        module = key.split(".lora_")[0].removeprefix("base_model.model.")
        name = gguf_tensor_name(module)
        if name is None:
            raise GGUFExportError(f"{resolved.weights_path}: {key} adapts a module llama.cpp "
                                  "has no name for.")
        if not is_a and module.endswith("q_proj"):
            data = permute(data, hparams["n_head"])
        elif not is_a and module.endswith("k_proj"):
            data = permute(data, hparams["n_head_kv"])
        yield f"{name}.weight.lora_{'a' if is_a else 'b'}", data
        return
    raise GGUFExportError(
        f"{resolved.weights_path}: tensor {key} is not a LoRA matrix (a bias or a saved "
        "module?); llama.cpp adapters hold lora_a/lora_b pairs only."
    )


def library_adapters(model_dir: Path, roots: list[Path] | None = None) -> list[ResolvedAdapter]:
    """Every adapter of the libraries for this base (``<intrinsic>/<base>/<kind>/``)."""
    from mellea_local.adapters import base_model_name, default_library_roots

    base = base_model_name(model_dir)
    found: list[ResolvedAdapter] = []
    seen: set[tuple[str, str]] = set()
    for root in roots if roots is not None else list(default_library_roots()):
        for intrinsic_dir in sorted(p for p in Path(root).iterdir() if p.is_dir()):
            for kind in AdapterKind:
                folder = intrinsic_dir / base / kind.value
                if folder.is_dir() and (intrinsic_dir.name, kind.value) not in seen:
                    seen.add((intrinsic_dir.name, kind.value))
                    found.append(read_adapter_folder(folder, intrinsic=intrinsic_dir.name,
                                                     expected_kind=kind.value))
    return found


def resolve_model_dir(model: str | os.PathLike[str]) -> Path:
    """``embedded`` -> the shipped weights; a registered name (``smollm2-135m``) -> its
    verified converted folder; else a local folder with safetensors."""
    from mellea_local.models import is_registered, model_path

    if str(model) == "embedded":
        from mellea_local.embedded import trained_weights_dir

        path = Path(trained_weights_dir())
    elif isinstance(model, str) and is_registered(model):
        path = model_path(model)
    else:
        path = Path(model).expanduser()
    if not (path / "model.safetensors").is_file() or not (path / "config.json").is_file():
        raise GGUFExportError(
            f"{path} holds no model.safetensors and config.json; pass a local Hugging Face "
            "model folder (one safetensors file) or 'embedded'."
        )
    return path.resolve()


def _no_link(path: Path) -> None:
    if path.is_symlink():
        raise GGUFExportError(
            f"{path} is a symbolic link; export-gguf does not write through links (a link "
            "planted at an output name would have its target overwritten). Remove the link or "
            "export to an empty folder.")


def _folder(path: Path) -> Path:
    """``path`` as an output folder: created when missing, refused when a link or a file."""
    _no_link(path)
    if path.exists() and not path.is_dir():
        raise GGUFExportError(f"{path} exists and is not a folder; pass an output folder "
                              "(empty or an earlier export).")
    path.mkdir(parents=True, exist_ok=True)
    _no_link(path)
    return path


@contextlib.contextmanager
def _written(path: Path) -> Iterator[Path]:
    """A fresh temporary file beside ``path`` to write; renamed over ``path`` on success."""
    _no_link(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)  # replaces a link at path; never follows it
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _copy(source: Path, target: Path) -> None:
    with _written(target) as tmp, open(source, "rb") as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)  # a shipped base GGUF is ~100 MB: streamed


def export_gguf(model: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
                roots: list[Path] | None = None,
                base_gguf: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Write the base, every library adapter for it, the tokenizer and ``manifest.json``.
    ``base_gguf``: serve this GGUF of the same model (checked: ``check_base_gguf``) as the
    base instead of writing an f32 one, e.g. the quantized file a registered model ships as.

    Every failure is a ``GGUFExportError`` naming the input and what to do."""
    for name, value in (("model", model), ("out_dir", out_dir), ("base_gguf", base_gguf)):
        if value is None and name == "base_gguf":
            continue
        if not isinstance(value, str | os.PathLike) or not str(value) or "\x00" in str(value):
            raise GGUFExportError(f"{name}={value!r} is not a path; pass a folder path (or "
                                  "'embedded' or a registered name as the model).")
    try:
        return _export(model, Path(out_dir).expanduser(), roots,
                       None if base_gguf is None else Path(base_gguf).expanduser())
    except GGUFExportError:
        raise
    except Exception as exc:  # a raw error from reading or writing: name it and the fix
        from mellea_local.errors import MelleaLocalError

        if isinstance(exc, MelleaLocalError):
            raise
        raise GGUFExportError(
            f"export-gguf of {str(model)!r} to {str(out_dir)!r} failed: {type(exc).__name__}: "
            f"{exc}. Check that the model folder holds a complete Hugging Face Llama model "
            "(config.json, model.safetensors, tokenizer) and that the output folder is "
            "writable.") from exc


def _export(model: str | os.PathLike[str], out: Path, roots: list[Path] | None,
            base_gguf: Path | None) -> dict[str, Any]:
    model_dir = resolve_model_dir(model)
    _folder(out)
    if base_gguf is None:
        base_name = BASE_FILE
        with _written(out / base_name) as tmp:
            hparams = write_base(model_dir, tmp)
    else:
        hparams = check_base_gguf(model_dir, base_gguf)
        base_name = f"base-{base_gguf.name}"  # never an adapter folder's or the manifest's
        _copy(base_gguf, out / base_name)
    tok_dir = _folder(out / TOKENIZER_DIR)
    for name in _TOKENIZER_FILES:
        if (model_dir / name).is_file():
            _copy(model_dir / name, tok_dir / name)
    entries = []
    for resolved in library_adapters(model_dir, roots):
        rel = Path(resolved.intrinsic or resolved.path.name) / resolved.kind.value
        _folder(out / rel.parent)
        _folder(out / rel)
        with _written(out / rel / "adapter.gguf") as tmp:
            write_adapter(resolved, hparams, tmp)
        for name in ("io.yaml", "adapter_config.json", "adapter_model.safetensors"):
            _copy(resolved.path / name, out / rel / name)
        inv = resolved.invocation_tokens
        entries.append({
            "intrinsic": resolved.intrinsic, "kind": resolved.kind.value,
            "file": str(rel / "adapter.gguf"), "folder": str(rel),
            "invocation_tokens": list(inv) if inv else None,
            "gguf_invocation_tokens": exported_invocation(resolved.kind, inv),
        })
    manifest = {"version": MANIFEST_VERSION, "model": model_dir.name, "base": base_name,
                "tokenizer": TOKENIZER_DIR, "n_vocab": hparams["n_vocab"],
                "n_ctx_train": hparams["n_ctx_train"], "adapters": entries}
    with _written(out / MANIFEST) as tmp:
        tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest
