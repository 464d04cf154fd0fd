"""The random-init model builder: seeding, sizes, saving, and real generation."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mellea_local.embedded import build_model, build_tiny, save
from mellea_local.errors import EmbeddedModelError

CHAT = [{"role": "user", "content": "What is the capital of France?"}]


def _prompt(tok, **kwargs):
    return tok.apply_chat_template(
        CHAT, add_generation_prompt=True, return_dict=True, return_tensors="pt", **kwargs
    )


def test_build_leaves_the_global_rng_alone(tiny_tokenizer):
    torch.manual_seed(1234)
    expected = torch.rand(4)
    torch.manual_seed(1234)
    build_model(tiny_tokenizer, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1)
    assert torch.equal(torch.rand(4), expected)


def test_seed_decides_the_weights(tiny_tokenizer, tiny_model):
    sizes = {"hidden_size": 64, "num_layers": 2}
    same = build_model(tiny_tokenizer, seed=0, **sizes).state_dict()
    other = build_model(tiny_tokenizer, seed=1, **sizes).state_dict()
    reference = tiny_model.state_dict()
    assert same.keys() == reference.keys() == other.keys()
    assert all(torch.equal(same[k], reference[k]) for k in reference)
    assert not torch.equal(
        other["model.embed_tokens.weight"], reference["model.embed_tokens.weight"]
    )


def test_sizes_and_token_ids(tiny_tokenizer):
    model = build_model(
        tiny_tokenizer, hidden_size=48, num_layers=3, num_heads=6, num_kv_heads=3, max_position=512
    )
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size) == (48, 3, 96)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads) == (6, 3)
    assert cfg.max_position_embeddings == 512
    assert cfg.vocab_size == len(tiny_tokenizer)
    assert model.get_input_embeddings().weight.shape == (len(tiny_tokenizer), 48)
    assert model.lm_head.weight is model.get_input_embeddings().weight  # tied
    assert len(model.model.layers) == 3
    gen = model.generation_config
    assert (
        gen.eos_token_id
        == cfg.eos_token_id
        == tiny_tokenizer.convert_tokens_to_ids("<|end_of_text|>")
    )
    assert gen.pad_token_id == cfg.pad_token_id == tiny_tokenizer.pad_token_id
    assert gen.do_sample is False
    assert not model.training
    assert build_model(tiny_tokenizer, intermediate_size=40).config.intermediate_size == 40


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"hidden_size": 30, "num_heads": 4}, "not divisible by num_heads"),
        ({"num_heads": 4, "num_kv_heads": 3}, "not a multiple of num_kv_heads"),
    ],
)
def test_sizes_that_do_not_fit_are_refused(tiny_tokenizer, sizes, message):
    with pytest.raises(EmbeddedModelError, match=message):
        build_model(tiny_tokenizer, **sizes)


def test_generate_is_real_and_greedy(tiny_model, tiny_tokenizer):
    enc = _prompt(tiny_tokenizer, enable_thinking=True)
    n = enc["input_ids"].shape[1]
    first = tiny_model.generate(**enc, max_new_tokens=12)
    second = tiny_model.generate(**enc, max_new_tokens=12)
    assert torch.equal(first, second)  # greedy by the shipped generation config
    assert torch.equal(first[:, :n], enc["input_ids"])
    new = first[0, n:]
    assert 1 <= len(new) <= 12
    assert int(new.max()) < len(tiny_tokenizer)
    # The logits of the last prompt position pick the first generated token.
    with torch.no_grad():
        logits = tiny_model(**enc).logits
    assert int(logits[0, -1].argmax()) == int(new[0])
    assert isinstance(tiny_tokenizer.decode(new), str)


def test_saved_folder_loads_offline_and_matches(tiny_model, tiny_tokenizer, tiny_model_dir):
    files = {p.name for p in tiny_model_dir.iterdir()}
    assert "model.safetensors" in files
    assert not {f for f in files if f.endswith((".bin", ".pt", ".pth"))}
    assert {"chat_template.jinja", "generation_config.json", "tokenizer.json"} <= files
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert tok.chat_template == tiny_tokenizer.chat_template
    enc = _prompt(tok)
    assert torch.equal(enc["input_ids"], _prompt(tiny_tokenizer)["input_ids"])
    with torch.no_grad():
        assert torch.equal(model(**enc).logits, tiny_model(**enc).logits)
    assert torch.equal(
        model.generate(**enc, max_new_tokens=6), tiny_model.generate(**enc, max_new_tokens=6)
    )


def test_build_tiny_saves_what_it_returns(tmp_path):
    model, tok = build_tiny(tmp_path / "m", hidden_size=32, num_layers=1, num_heads=2, seed=3)
    assert model.config.hidden_size == 32
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())
    assert save(model, tok, tmp_path / "again") == tmp_path / "again"
