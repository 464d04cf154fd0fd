"""What a GGUF must hold before it is converted: an architecture we convert, every tensor that
architecture needs with the shape its header implies, and exactly ``block_count`` layers.

Why before: transformers reads many architectures (``mamba`` included) and fills what a file
lacks with fresh random weights or reads a ``block_count`` it cannot meet for minutes; the
result would be cached as if it were the model. This check reads only the header (the
tensors are memory-mapped, never loaded), so a bad file is refused in milliseconds with the
tensor or key at fault named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mellea_local.errors import GGUFConversionError

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
"""Decoder-only attention models whose GGUF tensors map onto a plain transformers model of the
same layout (what ``convert_gguf`` writes and the KV cache and PEFT expect)."""

_LAYER_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                  "ffn_gate", "ffn_up", "ffn_down")
_ARCH_LAYER_EXTRA = {"qwen2": ("attn_q.bias", "attn_k.bias", "attn_v.bias"),
                     "qwen3": ("attn_q_norm", "attn_k_norm")}
_OPTIONAL_LAYER = ("attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias")
_OPTIONAL_GLOBAL = ("output.weight", "rope_freqs.weight")
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")
MAX_LAYERS = 4096
"""No model we can convert has more; a header claiming more is refused before any loop."""


@dataclass(frozen=True)
class GGUFLayout:
    """What the header says: the architecture and the sizes the tensor shapes follow from."""

    architecture: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int


def check_gguf(path: str | Path) -> GGUFLayout:
    """The layout of the GGUF at ``path`` once it is known convertible, else a
    ``GGUFConversionError`` naming the file, the key or tensor at fault, and the fix."""
    import gguf

    path = Path(path)
    fix = ("Use a complete GGUF of a " + "/".join(SUPPORTED_ARCHITECTURES) + " model as "
           "llama.cpp's convert_hf_to_gguf.py writes it (re-download it if it was cut short).")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:  # the reader raises ValueError, struct.error, IndexError, ...
        raise GGUFConversionError(
            f"{str(path)!r} is not a readable GGUF file ({type(exc).__name__}: {exc}). "
            f"{fix}") from None
    fields = reader.fields

    def value(key: str, *, required: bool = True) -> Any:
        field = fields.get(key)
        if field is None:
            if required:
                raise GGUFConversionError(
                    f"{str(path)!r} has no {key!r} in its header, so its layout is unknown and "
                    f"it is refused. {fix}")
            return None
        try:
            return field.contents()
        except Exception as exc:  # a malformed field
            raise GGUFConversionError(
                f"{str(path)!r}: header key {key!r} cannot be read ({exc}). {fix}") from None

    arch = value("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise GGUFConversionError(
            f"{str(path)!r} is a {arch!r} model; mellea-local converts only "
            f"{', '.join(SUPPORTED_ARCHITECTURES)} (decoder-only attention models whose KV "
            "cache and adapters it supports). Use a GGUF of one of those architectures.")

    def count(key: str, *, required: bool = True) -> int | None:
        raw = value(f"{arch}.{key}", required=required)
        if raw is None:
            return None
        if isinstance(raw, list):  # per-layer head counts: all must agree here
            raw = raw[0] if raw and all(r == raw[0] for r in raw) else raw
        if isinstance(raw, bool) or not isinstance(raw, int) or not 0 < raw <= 1 << 24:
            raise GGUFConversionError(
                f"{str(path)!r}: {arch}.{key} is {raw!r}, not a positive size. {fix}")
        return int(raw)

    layers = count("block_count")
    hidden = count("embedding_length")
    heads = count("attention.head_count")
    ffn = count("feed_forward_length")
    assert layers is not None and hidden is not None and heads is not None and ffn is not None
    kv_heads = count("attention.head_count_kv", required=False) or heads
    head_dim = count("attention.key_length", required=False) or hidden // heads
    tokens = fields.get("tokenizer.ggml.tokens")
    vocab = count("vocab_size", required=False) or (len(tokens.data) if tokens else None)
    if vocab is None:
        raise GGUFConversionError(
            f"{str(path)!r} states no vocabulary size ({arch}.vocab_size or "
            f"tokenizer.ggml.tokens). {fix}")
    tensors = {t.name: tuple(int(d) for d in t.shape) for t in reader.tensors}
    if layers > MAX_LAYERS or layers * len(_LAYER_TENSORS) > len(tensors):
        raise GGUFConversionError(
            f"{str(path)!r}: {arch}.block_count is {layers}, but the file holds only "
            f"{len(tensors)} tensors ({_layers_present(tensors)} layers): the header and the "
            f"tensors disagree, so it is refused. {fix}")
    layout = GGUFLayout(arch, layers, hidden, heads, kv_heads, head_dim, ffn, vocab)
    _check_tensors(path, layout, tensors, fix)
    return layout


def _layers_present(tensors: Mapping[str, tuple[int, ...]]) -> int:
    found = {int(m.group(1)) for name in tensors if (m := _BLOCK.match(name))}
    return len(found)


def _expected(layout: GGUFLayout) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """Required tensors with their GGUF shapes (ne order: innermost dimension first), and
    the names that may also appear."""
    h, q, kv, f, v = (layout.hidden, layout.heads * layout.head_dim,
                      layout.kv_heads * layout.head_dim, layout.ffn, layout.vocab)
    per_layer = {"attn_norm": (h,), "attn_q": (h, q), "attn_k": (h, kv), "attn_v": (h, kv),
                 "attn_output": (q, h), "ffn_norm": (h,), "ffn_gate": (h, f),
                 "ffn_up": (h, f), "ffn_down": (f, h)}
    extra_shapes = {"attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,),
                    "attn_q_norm": (layout.head_dim,), "attn_k_norm": (layout.head_dim,)}
    required = {"token_embd.weight": (h, v), "output_norm.weight": (h,)}
    optional = set(_OPTIONAL_GLOBAL)
    for i in range(layout.layers):
        for name, shape in per_layer.items():
            required[f"blk.{i}.{name}.weight"] = shape
        for name in _ARCH_LAYER_EXTRA.get(layout.architecture, ()):
            key = f"blk.{i}.{name}" if name.endswith(".bias") else f"blk.{i}.{name}.weight"
            required[key] = extra_shapes[name]
        optional.update(f"blk.{i}.{name}" for name in _OPTIONAL_LAYER)
    return required, optional


def _check_tensors(path: Path, layout: GGUFLayout, tensors: Mapping[str, tuple[int, ...]],
                   fix: str) -> None:
    required, optional = _expected(layout)
    missing = [name for name in required if name not in tensors]
    if missing:
        raise GGUFConversionError(
            f"{str(path)!r} lacks {len(missing)} tensor(s) a {layout.architecture} model of "
            f"{layout.layers} layers needs, first {', '.join(missing[:3])}: converting it "
            f"would fill them with random weights, so it is refused. {fix}")
    for name, shape in tensors.items():
        want = required.get(name)
        if want is not None and shape != want:
            raise GGUFConversionError(
                f"{str(path)!r}: tensor {name} has shape {list(shape)}, but the header "
                f"(hidden {layout.hidden}, {layout.heads} heads of {layout.head_dim}, "
                f"{layout.kv_heads} kv heads, ffn {layout.ffn}, vocab {layout.vocab}) implies "
                f"{list(want)}. {fix}")
        if want is None and name not in optional:
            block = _BLOCK.match(name)
            where = (f"layer {block.group(1)}, but block_count is {layout.layers}"
                     if block and int(block.group(1)) >= layout.layers
                     else f"a tensor no {layout.architecture} model has")
            raise GGUFConversionError(
                f"{str(path)!r} holds {name} ({where}): the header and the tensors "
                f"disagree, so it is refused. {fix}")
    if "output.weight" in tensors and tensors["output.weight"] != required["token_embd.weight"]:
        raise GGUFConversionError(
            f"{str(path)!r}: tensor output.weight has shape {list(tensors['output.weight'])}, "
            f"expected {list(required['token_embd.weight'])}. {fix}")
