"""``export-gguf`` on the embedded model: what the files hold, read back with ``gguf``, and
what the exporter refuses. (That the numbers are right is proven by the score-equality tests.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

from mellea_local.adapters import read_adapter_folder
from mellea_local.backends.llama_server import read_gguf_folder
from mellea_local.backends.llama_server.gguf_export import (
    export_gguf,
    gguf_invocation,
    permute,
    write_adapter,
)
from mellea_local.errors import GGUFExportError


def _reader(path):
    import gguf

    return gguf.GGUFReader(str(path))


def test_manifest_names_every_file_and_the_invocations(gguf_dir):
    manifest = json.loads((gguf_dir / "manifest.json").read_text())
    kinds = {(a["intrinsic"], a["kind"]) for a in manifest["adapters"]}
    assert kinds == {("requirement-check", "alora"), ("requirement-check", "lora")}
    alora = next(a for a in manifest["adapters"] if a["kind"] == "alora")
    assert alora["gguf_invocation_tokens"] == alora["invocation_tokens"][1:]
    folder = read_gguf_folder(gguf_dir)
    assert folder.base.is_file() and all(f.is_file() for f in folder.adapter_files)
    assert [a.lora_id for a in folder.adapters] == list(range(len(folder.adapters)))


def test_base_gguf_is_llama_f32_with_tied_embeddings_and_our_vocabulary(gguf_dir, hf):
    reader = _reader(gguf_dir / "base-f32.gguf")
    fields = reader.fields
    assert fields["general.architecture"].contents() == "llama"
    assert fields["llama.attention.key_length"].contents() == 32
    assert fields["tokenizer.ggml.model"].contents() == "gpt2"
    tokens = fields["tokenizer.ggml.tokens"].contents()
    assert len(tokens) == len(hf.tokenizer)
    assert fields["tokenizer.ggml.eos_token_id"].contents() == hf.tokenizer.eos_token_id
    assert fields["tokenizer.ggml.bos_token_id"].contents() == hf.tokenizer.bos_token_id
    assert tokens[hf.tokenizer.eos_token_id] == hf.tokenizer.eos_token
    names = {t.name for t in reader.tensors}
    assert "output.weight" not in names and "token_embd.weight" in names
    assert all(t.tensor_type.name == "F32" for t in reader.tensors)
    q = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    ref = hf.model.get_submodule("model.layers.0.self_attn.q_proj").weight.detach().numpy()
    assert np.array_equal(np.asarray(q.data), permute(ref, 6))


def test_lora_gguf_keeps_peft_layouts_alpha_and_shortened_invocation(gguf_dir):
    path = gguf_dir / "requirement-check" / "alora"
    reader = _reader(path / "adapter.gguf")
    assert reader.fields["general.type"].contents() == "adapter"
    assert reader.fields["adapter.lora.alpha"].contents() == 64.0
    config = json.loads((path / "adapter_config.json").read_text())
    assert reader.fields["adapter.alora.invocation_tokens"].contents() == \
        config["alora_invocation_tokens"][1:]
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    with safe_open(str(path / "adapter_model.safetensors"), framework="pt") as f:
        a = f.get_tensor("base_model.model.model.layers.3.self_attn.v_proj.lora_A.weight")
        b = f.get_tensor("base_model.model.model.layers.3.self_attn.q_proj.lora_B.weight")
    assert np.array_equal(tensors["blk.3.attn_v.weight.lora_a"], a.numpy())  # [r, in]
    assert np.array_equal(tensors["blk.3.attn_q.weight.lora_b"], permute(b.numpy(), 6))
    assert len(tensors) == 2 * 7 * 3  # 7 modules x layers 3..5, A and B


def test_permute_matches_llama_cpp_interleaved_rope():
    """HF rotates halves (i, i + d/2); llama.cpp rotates pairs (2i, 2i + 1): row 2i of a head
    must be HF row i, row 2i + 1 HF row i + d/2."""
    w = torch.arange(2 * 8 * 3, dtype=torch.float32).reshape(16, 3).numpy()  # 2 heads, d=8
    out = permute(w, 2)
    for head in range(2):
        for i in range(4):
            assert np.array_equal(out[head * 8 + 2 * i], w[head * 8 + i])
            assert np.array_equal(out[head * 8 + 2 * i + 1], w[head * 8 + i + 4])


def test_one_token_invocation_and_rslora_are_refused(gguf_dir, tmp_path):
    with pytest.raises(GGUFExportError, match="plain LoRA"):
        gguf_invocation((31,))
    src = gguf_dir / "requirement-check" / "lora"
    copy = tmp_path / "rs"
    copy.mkdir()
    for name in ("io.yaml", "adapter_model.safetensors"):
        (copy / name).write_bytes((src / name).read_bytes())
    config = json.loads((src / "adapter_config.json").read_text())
    (copy / "adapter_config.json").write_text(json.dumps({**config, "use_rslora": True}))
    with pytest.raises(GGUFExportError, match="rsLoRA"):
        write_adapter(read_adapter_folder(copy), {"n_head": 6, "n_head_kv": 2},
                      tmp_path / "x.gguf")


def test_missing_model_folder_is_a_typed_error(tmp_path):
    with pytest.raises(GGUFExportError, match="'embedded'"):
        export_gguf(tmp_path / "nothing", tmp_path / "out")


def _header_gguf(path, fields, tokens):
    """A GGUF holding only metadata (no tensors): enough for ``check_base_gguf`` to read."""
    import gguf

    w = gguf.GGUFWriter(str(path), fields.pop("general.architecture", "llama"))
    for key, value in fields.items():
        w.add_uint32(key, value)
    w.add_token_list(tokens)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _embedded_shape():
    from mellea_local.embedded import trained_weights_dir

    config = json.loads((trained_weights_dir() / "config.json").read_text())
    return {"llama.block_count": config["num_hidden_layers"],
            "llama.embedding_length": config["hidden_size"],
            "llama.feed_forward_length": config["intermediate_size"],
            "llama.attention.head_count": config["num_attention_heads"],
            "llama.attention.head_count_kv": config["num_key_value_heads"],
            "llama.rope.dimension_count": config["hidden_size"] // config["num_attention_heads"]}


def test_a_base_gguf_is_copied_in_place_of_the_f32_base(tiny_gguf, tmp_path):
    manifest = export_gguf("embedded", tmp_path / "out", base_gguf=tiny_gguf)
    assert manifest["base"] == "base-mellea-tiny-chat.gguf"
    folder = read_gguf_folder(tmp_path / "out")
    assert folder.base.read_bytes() == tiny_gguf.read_bytes()
    assert not (tmp_path / "out" / "base-f32.gguf").exists()
    assert {(a["intrinsic"], a["kind"]) for a in manifest["adapters"]} == {
        ("requirement-check", "alora"), ("requirement-check", "lora")}


def test_a_base_gguf_of_another_model_is_refused_naming_the_mismatch(tiny_gguf, tmp_path):
    tokens = [t for t in _reader(tiny_gguf).fields["tokenizer.ggml.tokens"].contents()]
    shape = _embedded_shape()
    deeper = _header_gguf(tmp_path / "deeper.gguf",
                          {**shape, "llama.block_count": shape["llama.block_count"] + 1}, tokens)
    with pytest.raises(GGUFExportError, match="block_count"):
        export_gguf("embedded", tmp_path / "a", base_gguf=deeper)
    swapped = _header_gguf(tmp_path / "swapped.gguf", dict(shape),
                           [*tokens[:40], tokens[41], tokens[40], *tokens[42:]])
    with pytest.raises(GGUFExportError, match="differing from id 40"):
        export_gguf("embedded", tmp_path / "b", base_gguf=swapped)
    (tmp_path / "not.gguf").write_bytes(b"not a gguf at all")
    with pytest.raises(GGUFExportError, match="cannot be read as GGUF"):
        export_gguf("embedded", tmp_path / "c", base_gguf=tmp_path / "not.gguf")
    with pytest.raises(GGUFExportError, match="is not a file"):
        export_gguf("embedded", tmp_path / "d", base_gguf=tmp_path / "absent.gguf")
    with pytest.raises(GGUFExportError, match="base_gguf=5"):
        export_gguf("embedded", tmp_path / "e", base_gguf=5)


def test_the_command_takes_a_base_gguf(tiny_gguf, tmp_path):
    from typer.testing import CliRunner

    from mellea_local.cli import app

    result = CliRunner().invoke(app, ["export-gguf", "embedded", str(tmp_path / "out"),
                                      "--base-gguf", str(tiny_gguf)])
    assert result.exit_code == 0, result.output
    assert f"wrote {tmp_path / 'out' / 'base-mellea-tiny-chat.gguf'}" in result.output


@pytest.mark.llama_server
async def test_a_served_base_gguf_scores_as_peft(tiny_gguf, hf, tmp_path):
    """The copied GGUF (written as llama.cpp's converter lays one out) serves the exported
    adapters exactly: the same score as PEFT within the f32 tolerance."""
    from mellea_local.backends.llama_server import LlamaServerBackend
    from mellea_local.core.context import ChatContext
    from mellea_local.intrinsics import arequirement_check
    from mellea_local.messages import Message

    export_gguf("embedded", tmp_path / "out", base_gguf=tiny_gguf)
    ctx = ChatContext().add(Message("user", "Name a colour.")).add(Message("assistant", "Blue."))
    with LlamaServerBackend.launch(tmp_path / "out", threads=1, slots=1, ctx=1024) as llama:
        mine = await arequirement_check(ctx, llama, "The answer is one word.")
    ref = await arequirement_check(ctx, hf, "The answer is one word.")
    assert abs(mine - ref) <= 2e-3, (mine, ref)
