"""``train_adapter`` end to end on the embedded model: bad data refused before training, loss
falls, the adapter loads from the library layout and scores as validation said, and a run
killed mid-way resumes to identical weights."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from mellea_local.errors import TrainingDataError, TrainingError
from mellea_local.training import TrainConfig, train_adapter
from mellea_local.training.loop import CHECKPOINT


def config(data, root, **kw) -> TrainConfig:
    base = dict(data=str(data), model="embedded", out_root=str(root), epochs=2, batch_size=4,
                lr=1e-3, rank=4, alpha=8, seed=3, checkpoint_every=2, threads=1)
    base.update(kw)
    return TrainConfig(**base)


class Killed(Exception):
    pass


def test_bad_lines_are_all_listed_before_any_model_loads(tmp_path, monkeypatch):
    import mellea_local.training.loop as loop

    monkeypatch.setattr(loop, "_load_base", lambda cfg: pytest.fail("loaded a model"))
    good = {"messages": [{"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": "Hello."}],
            "requirement": "Be brief.", "label": True}
    lines = [json.dumps(good), "{not json", json.dumps({**good, "label": None}),
             json.dumps({**good, "messages": [{"role": "user", "content": "Hi"}]}),
             json.dumps({**good, "label": False})]
    data = tmp_path / "bad.jsonl"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TrainingDataError) as info:
        train_adapter(config(data, tmp_path / "lib"))
    text = str(info.value)
    assert "3 bad line(s)" in text
    assert "line 2: not valid JSON" in text and "line 3: no \"label\"" in text
    assert "line 4: the last message must be the assistant turn" in text
    assert not (tmp_path / "lib").exists()


def test_an_example_longer_than_max_length_is_named(check_jsonl, tmp_path):
    with pytest.raises(TrainingDataError, match=r"exceed --max-length 20 tokens"):
        train_adapter(config(check_jsonl, tmp_path, max_length=20))


def test_alora_trains_loss_falls_and_it_loads_and_scores_as_validation_said(
        check_jsonl, tmp_path):
    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.intrinsics.requirement_check import requirement_checks
    from mellea_local.messages import chat_context as context_of
    from mellea_local.training.data import load_training_data

    cfg = config(check_jsonl, tmp_path, epochs=3)
    result = train_adapter(cfg)
    assert result.path == tmp_path / "requirement-check" / "mellea-tiny-chat" / "alora"
    report = json.loads((result.path / "training.json").read_text())
    losses = report["loss_per_step"]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3
    assert report["data"]["sha256"] and report["invocation"]["text"] == "<requirements>"
    assert [v["epoch"] for v in report["validation_accuracy"]] == [1, 2, 3]
    assert (result.path / "io.yaml").is_file()
    assert not (result.path.parent / f"alora{CHECKPOINT}").exists()
    adapter_config = json.loads((result.path / "adapter_config.json").read_text())
    assert adapter_config["alora_invocation_tokens"] == report["invocation"]["tokens"]

    from mellea_local.embedded import trained_weights_dir

    backend = LocalHFBackend(trained_weights_dir(), device="cpu", dtype=torch.float32)
    loaded = backend.add_adapter("requirement-check", roots=[tmp_path])
    assert loaded.path == result.path and loaded.is_alora
    held = load_training_data(check_jsonl, validation=cfg.validation, seed=cfg.seed).validation
    right = 0
    for ex in held:
        score = requirement_checks(context_of(ex.messages), backend, [ex.requirement],
                                   adapter=loaded.name)[0]
        assert 0.0 <= score <= 1.0
        right += (score > 0.5) == (ex.label == "yes")
    assert right / len(held) == pytest.approx(report["validation_accuracy"][-1]["accuracy"])


def test_a_killed_run_resumes_to_identical_weights(check_jsonl, tmp_path):
    whole = train_adapter(config(check_jsonl, tmp_path / "whole"))

    def kill_at_5(step: int, loss: float) -> None:
        if step == 5:
            raise Killed  # after step 5; the last checkpoint is step 4

    with pytest.raises(Killed):
        train_adapter(config(check_jsonl, tmp_path / "killed"), on_step=kill_at_5)
    ckpt = tmp_path / "killed" / "requirement-check" / "mellea-tiny-chat" / f"alora{CHECKPOINT}"
    assert json.loads((ckpt / "state.json").read_text())["step"] == 4
    resumed = train_adapter(config(check_jsonl, tmp_path / "killed"))
    assert resumed.report["loss_per_step"] == whole.report["loss_per_step"]
    a = load_file(str(whole.path / "adapter_model.safetensors"))
    b = load_file(str(resumed.path / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_of_other_settings_is_refused_then_restart_discards_it(
        check_jsonl, tmp_path):
    def kill_at_3(step: int, loss: float) -> None:
        if step == 3:
            raise Killed

    with pytest.raises(Killed):
        train_adapter(config(check_jsonl, tmp_path), on_step=kill_at_3)
    with pytest.raises(TrainingError, match="different run"):
        train_adapter(config(check_jsonl, tmp_path, lr=5e-4))
    result = train_adapter(config(check_jsonl, tmp_path, lr=5e-4, max_steps=2), restart=True)
    assert result.report["steps"] == 2


def test_a_lora_trains_and_loads_as_a_lora(check_jsonl, tmp_path):
    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.embedded import trained_weights_dir

    result = train_adapter(config(check_jsonl, tmp_path, kind="lora", max_steps=3))
    assert result.path.name == "lora"
    assert "alora_invocation_tokens" not in json.loads(
        (result.path / "adapter_config.json").read_text()) or json.loads(
        (result.path / "adapter_config.json").read_text())["alora_invocation_tokens"] is None
    backend = LocalHFBackend(trained_weights_dir(), device="cpu", dtype=torch.float32)
    loaded = backend.add_adapter(str(result.path))
    assert not loaded.is_alora


@pytest.mark.parametrize("bad", [dict(kind="qlora"), dict(epochs=0), dict(lr=3.0)])
def test_bad_settings_are_typed_errors(check_jsonl, tmp_path, bad):
    with pytest.raises(TrainingError):
        train_adapter(config(check_jsonl, tmp_path, **bad))


def test_gradient_checkpointing_trains_the_same_weights(check_jsonl, tmp_path):
    plain = train_adapter(config(check_jsonl, tmp_path / "plain", max_steps=2))
    ckpt = train_adapter(config(check_jsonl, tmp_path / "ckpt", max_steps=2,
                                gradient_checkpointing=True))
    a = load_file(str(plain.path / "adapter_model.safetensors"))
    b = load_file(str(ckpt.path / "adapter_model.safetensors"))
    # The plain run takes the aLoRA's split forward, the checkpointed one the whole sequence:
    # the same sums in another order (1.5e-6 measured on weights up to 0.07).
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_init_from_starts_where_a_trained_adapter_ended(check_jsonl, tmp_path):
    first = train_adapter(config(check_jsonl, tmp_path / "first", max_steps=2))
    # one more step at a vanishing rate: the weights are the first run's, not a fresh init
    more = train_adapter(config(check_jsonl, tmp_path / "more", max_steps=1, lr=1e-12,
                                init_from=str(first.path)))
    fresh = train_adapter(config(check_jsonl, tmp_path / "fresh", max_steps=1, lr=1e-12))
    a = load_file(str(first.path / "adapter_model.safetensors"))
    b = load_file(str(more.path / "adapter_model.safetensors"))
    c = load_file(str(fresh.path / "adapter_model.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert not all(torch.allclose(a[k], c[k], atol=1e-3) for k in a)
    assert more.report["hyperparameters"]["init_from"] == str(first.path)


def test_init_from_of_other_settings_or_no_adapter_is_refused(check_jsonl, tmp_path):
    first = train_adapter(config(check_jsonl, tmp_path / "first", max_steps=1))
    with pytest.raises(TrainingError, match=r"r 4 \(this run: 8\)"):
        train_adapter(config(check_jsonl, tmp_path / "b", max_steps=1, rank=8,
                             init_from=str(first.path)))
    with pytest.raises(TrainingError, match="not an adapter folder"):
        train_adapter(config(check_jsonl, tmp_path / "c", init_from=str(tmp_path)))
