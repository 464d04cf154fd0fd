"""The peer's ``{"item", "label"}`` rows train a custom intrinsic with its own io.yaml, called
with ``mellea_local.intrinsic(backend, NAME, ctx)`` on the item as the user turn."""

from __future__ import annotations

import json
import random

import pytest
import torch

from mellea_local.errors import TrainingDataError
from mellea_local.training import TrainConfig, train_adapter

FRUITS = ["apple", "banana", "cherry", "grape", "lemon", "mango"]
OTHER = ["table", "river", "pencil", "engine", "window", "candle"]


@pytest.fixture(scope="module")
def peer_jsonl(tmp_path_factory):
    rng = random.Random(4)
    path = tmp_path_factory.mktemp("peer") / "data.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(40):
            fruit = i % 2 == 0
            word = rng.choice(FRUITS if fruit else OTHER)
            f.write(json.dumps({"item": f"I bought a {word} today.",
                                "label": "T" if fruit else "F"}) + "\n")
    return path


def test_item_label_rows_train_a_custom_intrinsic_that_scores_as_validation_said(
        peer_jsonl, tmp_path):
    from mellea_local import intrinsic
    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.embedded import trained_weights_dir
    from mellea_local.messages import chat_context as context_of
    from mellea_local.training.data import load_training_data

    cfg = TrainConfig(data=str(peer_jsonl), model="embedded", out_root=str(tmp_path),
                      intrinsic="fruit-check", epochs=2, batch_size=4, lr=1e-3, rank=4,
                      alpha=8, seed=1, threads=1)
    result = train_adapter(cfg)
    assert result.path == tmp_path / "fruit-check" / "mellea-tiny-chat" / "alora"
    assert result.report["labels"] == ["F", "T"]
    assert result.report["invocation"]["text"] == "<fruit-check>"
    backend = LocalHFBackend(trained_weights_dir(), device="cpu", dtype=torch.float32)
    backend.add_adapter(str(result.path))
    held = load_training_data(peer_jsonl, validation=cfg.validation, seed=cfg.seed).validation
    right = 0
    for ex in held:
        out = intrinsic(backend, "fruit-check", context_of(ex.messages))
        p = out["label"]
        assert 0.0 <= p <= 1.0  # P("F"), the first label in sorted order
        right += (p > 0.5) == (ex.label == "F")
    assert right / len(held) == pytest.approx(result.report["validation_accuracy"][-1]["accuracy"])


def test_mixed_formats_and_bad_peer_rows_are_listed(tmp_path):
    data = tmp_path / "mixed.jsonl"
    data.write_text("\n".join([
        json.dumps({"item": "a", "label": "T"}),
        json.dumps({"item": "", "label": "F"}),
        json.dumps({"messages": [{"role": "user", "content": "x"},
                                 {"role": "assistant", "content": "y"}],
                    "requirement": "r", "label": True}),
        json.dumps({"item": "b", "label": 1}),
    ]) + "\n", encoding="utf-8")
    with pytest.raises(TrainingDataError) as info:
        train_adapter(TrainConfig(data=str(data), out_root=str(tmp_path / "out")))
    text = str(info.value)
    assert 'line 2: "item" must be a non-empty string' in text
    assert "line 3: mixes the peer's item/label rows" in text
    assert 'line 4: "label" must be a non-empty string' in text
