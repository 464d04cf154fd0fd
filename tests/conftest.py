"""Shared test set-up: offline hub, GPU marker, and the tiny-model fixtures.

Fixtures that build models live here (and only here) so every test uses the same objects.
"""

from __future__ import annotations

import os

# Before transformers/huggingface_hub are imported anywhere: a missing model must fail at
# once instead of retrying the hub for ~45 s.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Tests that call start_session() or `check` without a model assert the embedded model's
# behaviour; CI has SmolLM2 in the cache, which would otherwise be the default
# (session.default_model). Tests of the default itself clear this with monkeypatch.
os.environ.setdefault("MELLEA_LOCAL_DEFAULT_MODEL", "embedded")

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis times each example (200 ms deadline) and fails a test whose example ran slow once:
# on a loaded CI machine (other jobs, OpenMP threads) that is noise, not a finding. The profile
# keeps every property and example count, and only drops the wall-clock checks.
settings.register_profile(
    "loaded-ci", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "loaded-ci"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch is a hard dependency
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# --- The tiny embedded model family (mellea_local.embedded) ------------------------------------
# Session-scoped and SHARED by every test: never mutate these objects (no training, no
# PeftModel.from_pretrained / get_peft_model on `tiny_model`, which patch the base in place).
# Build a private copy with `mellea_local.embedded.build_model(tiny_tokenizer, ...)` or load one
# from `tiny_model_dir` instead.


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """The embedded family's tokenizer (chat and response templates included)."""
    from mellea_local.embedded import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer):
    """A random-init Llama (hidden 64, 2 layers, seed 0) in eval mode, on the CPU."""
    from mellea_local.embedded import build_model

    return build_model(tiny_tokenizer, hidden_size=64, num_layers=2)


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model, tiny_tokenizer, tmp_path_factory):
    """A folder holding `tiny_model` and `tiny_tokenizer` as `from_pretrained` reads them."""
    from mellea_local.embedded import save

    return save(tiny_model, tiny_tokenizer, tmp_path_factory.mktemp("tiny-llama"))


# --- Fresh backends on the shipped model (tests that try to damage a backend) ------------------


@pytest.fixture()
def bare_backend():
    """The shipped ``mellea-tiny-chat`` with no adapter loaded (PEFT has not touched it)."""
    import torch
    from adapter_folders import WEIGHTS

    from mellea_local.backends.huggingface import LocalHFBackend

    return LocalHFBackend(WEIGHTS, device="cpu", dtype=torch.float32)


@pytest.fixture()
def embedded_backend():
    """A fresh ``LocalHFBackend.embedded()``: the shipped model and both trained adapters."""
    from mellea_local.backends.huggingface import LocalHFBackend

    return LocalHFBackend.embedded()


@pytest.fixture(scope="session")
def shared_embedded_backend():
    """The shipped trained model with its two requirement-check adapters, loaded once.

    SHARED: tests may generate and check with it, but must not add or remove adapters or change
    its options; a test that damages a backend uses the fresh ``embedded_backend``.
    """
    from mellea_local.backends.huggingface import LocalHFBackend

    return LocalHFBackend.embedded()


# --- A GGUF of the embedded model (mellea_local.models) -----------------------------------------


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """The trained embedded model written as an f32 GGUF, chat template included, with the
    ``gguf`` package (as llama.cpp lays one out), so converting it back must reproduce the
    embedded model's logits exactly. Named ``mellea-tiny-chat.gguf``: its conversion is a
    folder of that name, so the embedded adapter libraries fit it."""
    import json
    from pathlib import Path

    import gguf
    import numpy as np
    from safetensors import safe_open
    from transformers import AutoTokenizer

    from mellea_local.embedded import trained_weights_dir

    src = Path(trained_weights_dir())
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    tokenizer = AutoTokenizer.from_pretrained(str(src))
    out = tmp_path_factory.mktemp("gguf") / "mellea-tiny-chat.gguf"
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // n_head
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name("mellea-tiny-chat")
    w.add_block_count(config["num_hidden_layers"])
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float((config.get("rope_parameters") or {}).get("rope_theta", 1e4)))
    w.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    w.add_vocab_size(config["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    tokens = [""] * len(tokenizer)
    types = [1] * len(tokenizer)
    for token, i in data["model"]["vocab"].items():
        tokens[i] = token
    for added in data.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = 3 if added.get("special") else 4
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([m if isinstance(m, str) else " ".join(m)
                        for m in data["model"].get("merges", [])])
    w.add_bos_token_id(tokenizer.bos_token_id)
    w.add_eos_token_id(tokenizer.eos_token_id)
    w.add_pad_token_id(tokenizer.pad_token_id)
    w.add_chat_template(tokenizer.chat_template)
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
             "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    with safe_open(str(src / "model.safetensors"), framework="np") as f:
        for key in sorted(f.keys()):
            stem = key.removesuffix(".weight").removeprefix("model.")
            tensor = f.get_tensor(key).astype(np.float32)
            if stem in ("embed_tokens", "norm", "lm_head"):
                name = {"embed_tokens": "token_embd", "norm": "output_norm",
                        "lm_head": "output"}[stem]
            else:
                _, layer, rest = stem.split(".", 2)
                name = f"blk.{layer}.{names[rest]}"
                heads = {"self_attn.q_proj": n_head, "self_attn.k_proj": n_kv}.get(rest)
                if heads:  # HF's rotate-half rows -> llama.cpp's interleaved RoPE order
                    tensor = (tensor.reshape(heads, 2, tensor.shape[0] // heads // 2,
                                             *tensor.shape[1:])
                              .swapaxes(1, 2).reshape(tensor.shape))
            w.add_tensor(f"{name}.weight", np.ascontiguousarray(tensor))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
