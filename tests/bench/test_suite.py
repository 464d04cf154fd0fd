"""The suite's choices: names, option checks, which backend accuracy scores (no timing)."""

from __future__ import annotations

import pytest
import torch

from mellea_local.bench import suite
from mellea_local.bench.subjects import SIZES, build_sized_model
from mellea_local.bench.suite import SuiteConfig, default_name


def test_default_names_keep_quick_and_gpu_runs_apart():
    assert default_name(False, torch.device("cpu")) == "bench"
    assert default_name(True, torch.device("cpu")) == "bench-quick"
    assert default_name(True, torch.device("cuda")) == "bench-quick-cuda"


@pytest.mark.parametrize(("cfg", "words"), [
    (SuiteConfig(size="huge"), "--size .huge.: no such shape"),
    (SuiteConfig(size="tiny", model="embedded"), "not both"),
    (SuiteConfig(name="../x"), "plain file name"),
    (SuiteConfig(lengths=[4]), "at least 64"),
    (SuiteConfig(lengths=[40]), "at least 64"),
    (SuiteConfig(repeats=0), "--repeats must be at least 1"),
    (SuiteConfig(skip=("nothing",)), "--skip nothing: no such section"),
])
def test_bad_configs_fail_before_any_model(cfg, words, tmp_path):
    cfg.out_dir = tmp_path / "out"
    with pytest.raises(ValueError, match=words):
        suite.run_suite(cfg)
    assert not cfg.out_dir.exists()


def test_the_granite_shape_exists_for_gpu_runs():
    assert SIZES["granite-3b-shape"]["hidden_size"] == 2560
    assert SIZES["granite-3b-shape"]["num_layers"] == 40


def test_sized_models_are_deterministic(tiny_tokenizer):
    a = build_sized_model(tiny_tokenizer, "tiny")
    b = build_sized_model(tiny_tokenizer, "tiny")
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    with pytest.raises(ValueError, match="Unknown model size"):
        build_sized_model(tiny_tokenizer, "huge")


def test_accuracy_uses_the_embedded_adapters_when_shipped(bench_backend, tmp_path, monkeypatch):
    import mellea_local.launch as options

    (tmp_path / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr(suite, "_embedded_weights", lambda: tmp_path)
    asked = []
    monkeypatch.setattr(options, "load_backend",
                        lambda model, **kw: asked.append(model) or bench_backend)
    backend, adapters, label = suite.accuracy_backend(None, None, device="cpu")
    assert asked == ["embedded"] and backend is bench_backend and label == "embedded"
    assert [a.name for a in adapters] == ["rc_alora", "rc_lora"]


def test_accuracy_is_skipped_with_a_note_without_the_embedded_weights(tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "_embedded_weights", lambda: tmp_path / "absent")
    backend, adapters, why = suite.accuracy_backend(None, None, device="cpu")
    assert backend is None and adapters == []
    assert "train_embedded.py" in why and "--model" in why


def test_benchmarking_embedded_speed_without_its_weights_says_so(tmp_path, monkeypatch):
    from mellea_local.errors import ModelLoadError

    monkeypatch.setattr(suite, "_embedded_weights", lambda: tmp_path / "absent")
    with pytest.raises(ModelLoadError, match="embedded model is missing"):
        suite._speed_subject(SuiteConfig(model="embedded"), "tiny", torch.device("cpu"),
                             torch.float32, 8192)
