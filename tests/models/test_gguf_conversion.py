"""A GGUF becomes a cached plain safetensors model that computes what the GGUF holds.

The GGUF is the trained embedded model written as f32 (``tiny_gguf``), so the conversion must
reproduce the embedded model's logits exactly, keep its tokenizer and chat template, and let
the embedded adapter library fit it by name.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from mellea_local.errors import GGUFConversionError, ModelIntegrityError
from mellea_local.models import convert_gguf, verify_converted
from mellea_local.models.cache import MANIFEST


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def converted(tiny_gguf, root):
    return convert_gguf(tiny_gguf, root=root)


def test_conversion_reproduces_the_source_model_exactly(converted, tiny_gguf):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mellea_local.embedded import trained_weights_dir

    assert converted.name == "mellea-tiny-chat"
    assert (converted / "model.safetensors").is_file()
    manifest = verify_converted(converted)
    assert manifest["source"]["gguf"] == tiny_gguf.name
    ref_dir = trained_weights_dir()
    ref = AutoModelForCausalLM.from_pretrained(str(ref_dir), dtype=torch.float32).eval()
    got = AutoModelForCausalLM.from_pretrained(str(converted), dtype=torch.float32).eval()
    assert not hasattr(got.config, "quantization_config")
    linears = [m for n, m in got.named_modules() if n.endswith("q_proj")]
    assert linears and all(type(m) is torch.nn.Linear for m in linears)
    ref_tok = AutoTokenizer.from_pretrained(str(ref_dir))
    tok = AutoTokenizer.from_pretrained(str(converted))
    assert tok.chat_template == ref_tok.chat_template
    chat = [{"role": "user", "content": "What is 23 + 19? Answer in one word."}]
    ids = ref_tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)["input_ids"]
    assert tok.apply_chat_template(chat, add_generation_prompt=True, return_dict=True,
                                   return_tensors="pt")["input_ids"].tolist() == ids.tolist()
    with torch.no_grad():
        diff = (got(ids).logits - ref(ids).logits).abs().max().item()
    assert diff == 0.0  # f32 in, f32 out: the same numbers


def test_a_second_load_reuses_the_cache(converted, tiny_gguf, root):
    stamp = (converted / "model.safetensors").stat().st_mtime_ns
    assert convert_gguf(tiny_gguf, root=root) == converted
    assert (converted / "model.safetensors").stat().st_mtime_ns == stamp


def test_the_backend_loads_a_gguf_and_its_adapters_score_as_on_the_source(
        tiny_gguf, root, monkeypatch, shared_embedded_backend):
    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.core.context import ChatContext
    from mellea_local.intrinsics.requirement_check import requirement_checks
    from mellea_local.messages import Message

    monkeypatch.setenv("MELLEA_LOCAL_MODELS", str(root))
    backend = LocalHFBackend(tiny_gguf, device="cpu")
    assert backend.base_model_name == "mellea-tiny-chat"
    backend.add_adapter("requirement-check", name="requirement-check_alora")
    ctx = ChatContext().add(Message("user", "Name a fruit.")).add(
        Message("assistant", "Banana."))
    reqs = ["Answer in one word.", "Mention an animal.", "Answer in French."]
    got = requirement_checks(ctx, backend, reqs, adapter="requirement-check_alora")
    want = requirement_checks(ctx, shared_embedded_backend, reqs,
                              adapter="requirement-check_alora")
    assert got == pytest.approx(want, abs=1e-6)


def test_a_changed_byte_is_refused(converted, tmp_path):
    from mellea_local.backends.huggingface import LocalHFBackend

    copy = tmp_path / converted.name
    shutil.copytree(converted, copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelIntegrityError, match=r"model\.safetensors"):
        LocalHFBackend(copy, device="cpu")


def test_a_truncated_file_or_a_missing_manifest_is_refused(converted, tmp_path):
    copy = tmp_path / converted.name
    shutil.copytree(converted, copy)
    with open(copy / "tokenizer.json", "r+b") as f:
        f.truncate(100)
    with pytest.raises(ModelIntegrityError, match=r"tokenizer\.json"):
        verify_converted(copy)
    (copy / MANIFEST).unlink()
    with pytest.raises(ModelIntegrityError, match="conversion never finished"):
        verify_converted(copy)


def test_a_corrupt_cache_entry_is_refused_not_reconverted(tiny_gguf, tmp_path):
    folder = convert_gguf(tiny_gguf, root=tmp_path)
    (folder / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ModelIntegrityError, match=r"config\.json"):
        convert_gguf(tiny_gguf, root=tmp_path)


def test_a_folder_with_two_ggufs_names_them(tiny_gguf, tmp_path):
    from mellea_local.models import find_gguf

    for name in ("a.gguf", "b.gguf"):
        shutil.copy(tiny_gguf, tmp_path / name)
    with pytest.raises(GGUFConversionError, match=r"a\.gguf, b\.gguf"):
        find_gguf(tmp_path)


def test_a_file_that_is_not_a_gguf_is_a_typed_error(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(GGUFConversionError, match=r"broken\.gguf"):
        convert_gguf(bad, root=tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("model.safetensors"))


def test_a_bfloat16_conversion_is_its_own_cache_entry_and_close_to_float32(
        converted, tiny_gguf, root):
    from transformers import AutoModelForCausalLM

    half = convert_gguf(tiny_gguf, root=root, dtype="bfloat16")
    assert half != converted and half.parent.name.endswith("-bfloat16")
    a = AutoModelForCausalLM.from_pretrained(str(converted), dtype=torch.float32).eval()
    b = AutoModelForCausalLM.from_pretrained(str(half), dtype="auto").eval()
    assert b.dtype == torch.bfloat16
    ids = torch.tensor([[5, 17, 40, 3, 99, 12]])
    with torch.no_grad():
        fa, fb = a(ids).logits, b(ids).logits.float()
    # bf16 weights and arithmetic (8 mantissa bits): next-token probabilities within 0.02.
    assert (fa.softmax(-1) - fb.softmax(-1)).abs().max().item() < 0.02
    assert (fa.argmax(-1) == fb.argmax(-1)).float().mean().item() >= 0.8
    with pytest.raises(GGUFConversionError, match="float16"):
        convert_gguf(tiny_gguf, root=root, dtype="float16")


def test_a_folder_holding_one_gguf_loads_as_that_gguf(converted, tiny_gguf, root, tmp_path,
                                                      monkeypatch):
    from mellea_local.backends.huggingface import LocalHFBackend

    folder = tmp_path / "download"
    folder.mkdir()
    shutil.copy(tiny_gguf, folder / tiny_gguf.name)
    monkeypatch.setenv("MELLEA_LOCAL_MODELS", str(root))
    backend = LocalHFBackend(folder, device="cpu")
    assert backend.model_id == str(converted)  # the cached conversion, not a second one
