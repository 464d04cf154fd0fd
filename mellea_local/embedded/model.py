"""Random-init Llama-architecture models of any size for the embedded tokenizer.

Tests need a real model (real attention, real KV cache, real PEFT targets) that builds in
milliseconds without a download; the embedded trained model (issue 5) starts from the same
builder. Initialisation is seeded and runs inside a forked torch RNG, so building a model
never changes the random stream of the code around it.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from ..errors import EmbeddedModelError
from .tokenizer import build_tokenizer


def model_config(
    tokenizer: PreTrainedTokenizerBase,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int | None = None,
    max_position: int = 8192,
) -> LlamaConfig:
    """The Llama config for `tokenizer`'s vocabulary and control-token ids.

    `intermediate_size` defaults to twice the hidden size (small, and GEMM-friendly).
    Embeddings are tied: at these sizes the embedding is most of the model.
    """
    if hidden_size % num_heads:
        raise EmbeddedModelError(
            f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}; "
            "pick sizes where hidden_size % num_heads == 0."
        )
    if num_heads % num_kv_heads:
        raise EmbeddedModelError(
            f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}; "
            "grouped-query attention needs num_heads % num_kv_heads == 0."
        )
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
    )


def generation_config(tokenizer: PreTrainedTokenizerBase) -> GenerationConfig:
    """Greedy by default, stopping at `<|end_of_text|>`; callers override per call."""
    return GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
        max_new_tokens=256,
    )


def build_model(
    tokenizer: PreTrainedTokenizerBase,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int | None = None,
    seed: int = 0,
    max_position: int = 8192,
    dtype: torch.dtype = torch.float32,
) -> LlamaForCausalLM:
    """A freshly initialised Llama for `tokenizer`, in eval mode, on the CPU.

    The same arguments give the same weights; the global torch RNG is left as it was.
    """
    config = model_config(
        tokenizer,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        max_position=max_position,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = generation_config(tokenizer)
    return model.to(dtype).eval()


def save(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase, out_dir: str | os.PathLike[str]
) -> Path:
    """Write a folder `from_pretrained` loads: safetensors weights, tokenizer, both templates."""
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


def build_tiny(
    out_dir: str | os.PathLike[str] | None = None,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int | None = None,
    seed: int = 0,
    max_position: int = 8192,
    dtype: torch.dtype = torch.float32,
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """Tokenizer plus a model of the given size; saved to `out_dir` when one is given."""
    tokenizer = build_tokenizer()
    model = build_model(
        tokenizer,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        seed=seed,
        max_position=max_position,
        dtype=dtype,
    )
    if out_dir is not None:
        save(model, tokenizer, out_dir)
    return model, tokenizer
