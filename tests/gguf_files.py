"""Small GGUF files for tests of what conversion refuses: a tiny llama-layout model written with
the ``gguf`` package, with knobs to break it one way at a time (another architecture, a missing
or misshapen tensor, a ``block_count`` that disagrees with the tensors).

These files carry no tokenizer, so a *valid* one still fails later, inside transformers: tests
of accepted conversions use the ``tiny_gguf`` fixture (the embedded model with its tokenizer).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

LAYER_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                 "ffn_gate", "ffn_up", "ffn_down")


def write_tiny_gguf(
    path: str | Path,
    *,
    arch: str = "llama",
    layers: int = 2,
    block_count: int | None = None,
    drop: Iterable[str] = (),
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    hidden: int = 16,
    heads: int = 2,
    kv_heads: int = 1,
    ff: int = 32,
    vocab: int = 32,
) -> Path:
    """A GGUF of a random tiny llama (``layers`` blocks) under ``arch``'s keys.

    ``drop`` names tensors left out (``"blk.1.attn_k.weight"``), ``shapes`` replaces a
    tensor's numpy shape, ``block_count`` writes another layer count than ``layers``.
    """
    import gguf
    import numpy as np

    path = Path(path)
    rng = np.random.default_rng(0)
    head_dim = hidden // heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(path.stem)
    w.add_block_count(layers if block_count is None else block_count)
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    # numpy shapes are (rows, columns) = (out, in), as llama.cpp's converter writes them.
    want = {"token_embd.weight": (vocab, hidden), "output_norm.weight": (hidden,),
            "output.weight": (vocab, hidden)}
    per_layer = {"attn_norm": (hidden,), "attn_q": (heads * head_dim, hidden),
                 "attn_k": (kv_heads * head_dim, hidden),
                 "attn_v": (kv_heads * head_dim, hidden),
                 "attn_output": (hidden, heads * head_dim), "ffn_norm": (hidden,),
                 "ffn_gate": (ff, hidden), "ffn_up": (ff, hidden), "ffn_down": (hidden, ff)}
    for i in range(layers):
        for name, shape in per_layer.items():
            want[f"blk.{i}.{name}.weight"] = shape
    dropped = set(drop)
    for name, shape in want.items():
        if name in dropped:
            continue
        shape = (shapes or {}).get(name, shape)
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
