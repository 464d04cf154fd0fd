"""What a run starts from and what it resumes from, on the embedded model and its shipped
aLoRA: the shipped adapter continued by default (its rank, alpha, modules and layers), the
general data replayed and reported apart, ``--init-from`` and checkpoints checked before use,
a non-finite loss stopping at its step."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from mellea_local.cli import app
from mellea_local.errors import (
    CheckpointError,
    InitAdapterError,
    TrainingDivergedError,
    TrainingError,
)
from mellea_local.training import TrainConfig, train_adapter
from mellea_local.training.loop import CHECKPOINT

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_TINY = ROOT / "adapters" / "requirement-check" / "mellea-tiny-chat" / "alora"
BASE = ("requirement-check", "mellea-tiny-chat")
WEIGHTS = "adapter_model.safetensors"


def config(data, root, **kw) -> TrainConfig:
    base = dict(data=str(data), model="embedded", out_root=str(root), epochs=1, batch_size=4,
                lr=1e-3, seed=3, checkpoint_every=2, threads=1, max_steps=3)
    base.update(kw)
    return TrainConfig(**base)


class Killed(Exception):
    pass


def copy_shipped(tmp_path) -> Path:
    folder = tmp_path / "init"
    shutil.copytree(SHIPPED_TINY, folder)
    return folder


def test_the_shipped_embedded_alora_is_continued_by_default(check_jsonl, tmp_path):
    said: list[str] = []
    result = train_adapter(config(check_jsonl, tmp_path / "lib", max_steps=1, lr=1e-12),
                           say=said.append)
    shipped = json.loads((SHIPPED_TINY / "adapter_config.json").read_text())
    written = json.loads((result.path / "adapter_config.json").read_text())
    assert result.report["start"]["source"] == "shipped"
    assert any(line.startswith("starting from the shipped adapter") for line in said)
    for key in ("r", "lora_alpha", "target_modules", "layers_to_transform",
                "alora_invocation_tokens"):
        assert written[key] == shipped[key], key
    a, b = load_file(str(SHIPPED_TINY / WEIGHTS)), load_file(str(result.path / WEIGHTS))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert "no general training data is shipped" in " ".join(said)  # none for the tiny model


def test_init_from_the_shipped_alora_takes_its_settings(check_jsonl, tmp_path):
    result = train_adapter(config(check_jsonl, tmp_path / "lib", max_steps=1,
                                  init_from=str(SHIPPED_TINY)))
    assert result.report["start"]["source"] == "init-from"
    assert result.report["hyperparameters"]["rank"] == 32
    assert result.report["hyperparameters"]["layers_to_transform"] == [3, 4, 5]


def test_a_rank_given_against_the_shipped_adapter_trains_fresh_and_says_so(check_jsonl,
                                                                           tmp_path):
    said: list[str] = []
    result = train_adapter(config(check_jsonl, tmp_path / "lib", max_steps=1, rank=4),
                           say=said.append)
    assert result.report["start"]["source"] == "scratch"
    assert any("not continuing the shipped adapter" in line and "r 32 (this run: 4)" in line
               for line in said)


def test_all_nan_init_weights_are_refused_before_the_model_loads(check_jsonl, tmp_path,
                                                                monkeypatch):
    import mellea_local.training.loop as loop

    monkeypatch.setattr(loop, "_load_base", lambda *a, **k: pytest.fail("loaded a model"))
    folder = copy_shipped(tmp_path)
    weights = load_file(str(folder / WEIGHTS))
    save_file({k: torch.full_like(v, float("nan")) for k, v in weights.items()},
              str(folder / WEIGHTS))
    with pytest.raises(InitAdapterError, match=r"tensor .* holds \d+ NaN or infinite"):
        train_adapter(config(check_jsonl, tmp_path / "lib", init_from=str(folder)))
    assert not (tmp_path / "lib").exists()


def test_a_wrong_shape_init_tensor_is_named_with_both_shapes(check_jsonl, tmp_path):
    folder = copy_shipped(tmp_path)
    cfg = json.loads((folder / "adapter_config.json").read_text())
    cfg["r"] = 16  # the weights are r=32
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(InitAdapterError) as info:
        train_adapter(config(check_jsonl, tmp_path / "lib", init_from=str(folder)))
    text = str(info.value)
    assert "lora_A" in text and "has shape (32, " in text and "needs (16, " in text


def test_init_weights_of_other_layers_are_named(check_jsonl, tmp_path):
    folder = copy_shipped(tmp_path)
    cfg = json.loads((folder / "adapter_config.json").read_text())
    cfg["layers_to_transform"] = [2, 3, 4, 5]
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(InitAdapterError, match=r"lacks \d+ tensor\(s\) \(e.g. .*layers\.2\."):
        train_adapter(config(check_jsonl, tmp_path / "lib", init_from=str(folder)))


@pytest.fixture(scope="module")
def checkpoint(check_jsonl, tmp_path_factory) -> Path:
    """A real checkpoint at step 2 of 5 (killed after step 3)."""
    lib = tmp_path_factory.mktemp("ckpt") / "lib"

    def kill(step: int, loss: float) -> None:
        if step == 3:
            raise Killed

    with pytest.raises(Killed):
        train_adapter(config(check_jsonl, lib, max_steps=5, rank=4, alpha=8), on_step=kill)
    return lib / Path(*BASE) / f"alora{CHECKPOINT}"


def _planted(checkpoint: Path, tmp_path: Path) -> tuple[Path, Path]:
    lib = tmp_path / "lib"
    target = lib / Path(*BASE) / f"alora{CHECKPOINT}"
    shutil.copytree(checkpoint, target)
    return lib, target


def _set_state(target: Path, **changes) -> None:
    state = json.loads((target / "state.json").read_text())
    state.update(changes)
    (target / "state.json").write_text(json.dumps(state))


@pytest.mark.parametrize(("damage", "words"), [
    ("nan-weights", "holds NaN or infinite values"),
    ("empty-weights", "lacks"),
    ("step-negative", "step -5 is not a whole number within"),
    ("step-huge", "step 1000000000 is not a whole number within"),
    ("losses-short", "loss history"),
    ("optimizer-garbage", "optimizer.pt cannot be read"),
])
def test_a_bad_checkpoint_is_refused_before_resume(check_jsonl, tmp_path, checkpoint, damage,
                                                   words):
    lib, target = _planted(checkpoint, tmp_path)
    weights = load_file(str(target / "trainable.safetensors"))
    if damage == "nan-weights":
        first = next(iter(weights))
        weights[first] = torch.full_like(weights[first], float("nan"))
        save_file(weights, str(target / "trainable.safetensors"))
    elif damage == "empty-weights":
        save_file({}, str(target / "trainable.safetensors"))
    elif damage == "step-negative":
        _set_state(target, step=-5)
    elif damage == "step-huge":
        _set_state(target, step=10**9)
    elif damage == "losses-short":
        _set_state(target, losses=[1.0])
    else:
        (target / "optimizer.pt").write_bytes(b"not a torch file")
    cfg = config(check_jsonl, lib, max_steps=5, rank=4, alpha=8)
    with pytest.raises(CheckpointError, match=words):
        train_adapter(cfg)
    assert (target / "state.json").is_file()  # refused, not deleted
    assert train_adapter(cfg, restart=True).report["steps"] == 5


def test_a_sound_checkpoint_still_resumes(check_jsonl, tmp_path, checkpoint):
    lib, _ = _planted(checkpoint, tmp_path)
    result = train_adapter(config(check_jsonl, lib, max_steps=5, rank=4, alpha=8))
    assert len(result.report["loss_per_step"]) == 5


def test_a_checkpoint_of_another_run_is_still_named_as_such(check_jsonl, tmp_path, checkpoint):
    lib, _ = _planted(checkpoint, tmp_path)
    with pytest.raises(TrainingError, match="different run"):
        train_adapter(config(check_jsonl, lib, max_steps=5, rank=4, alpha=8, lr=5e-4))


def test_a_nan_loss_stops_at_its_step_and_keeps_the_last_good_checkpoint(
        check_jsonl, tmp_path, monkeypatch):
    import mellea_local.training.loop as loop

    real = loop._loss
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        loss = real(*args, **kwargs)
        return loss * float("nan") if calls["n"] == 3 else loss

    monkeypatch.setattr(loop, "_loss", poisoned)
    lib = tmp_path / "lib"
    with pytest.raises(TrainingDivergedError, match="at step 3") as info:
        train_adapter(config(check_jsonl, lib, max_steps=5, rank=4, alpha=8))
    assert info.value.step == 3
    parent = lib / Path(*BASE)
    assert not (parent / "alora").exists()
    ckpt = parent / f"alora{CHECKPOINT}"
    assert json.loads((ckpt / "state.json").read_text())["step"] == 2
    weights = load_file(str(ckpt / "trainable.safetensors"))
    assert all(torch.isfinite(t).all() for t in weights.values())


def _general_file(tmp_path: Path) -> Path:
    """General lines of another family than the user's (the synthetic families, another seed)."""
    from mellea_local.embedded import synthetic as S

    path = tmp_path / "general.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for e in S.check_examples(random.Random(99), 5):
            f.write(json.dumps({"messages": e.messages, "requirement": e.requirement,
                                "label": e.label, "family": "general"}) + "\n")
    return path


def test_the_readme_command_continues_and_replays_and_reports_each_part(
        check_jsonl, tmp_path, monkeypatch):
    import mellea_local.datasets as datasets

    general = _general_file(tmp_path)
    monkeypatch.setattr(datasets, "training_path", lambda intrinsic, base: general)
    monkeypatch.setenv("MELLEA_LOCAL_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(app, ["train", str(check_jsonl), "--threads", "1",
                                      "--max-steps", "2", "--validation", "0.5"])
    assert result.exit_code == 0, result.output
    out = tmp_path / "home" / "adapters" / Path(*BASE) / "alora"
    assert f"writing to {out}" in result.stderr
    assert "starting from the shipped adapter" in result.stderr
    assert "replaying" in result.stderr and "--replay-ratio 0 turns it off" in result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == str(out) and f"adapter written to {out}" in lines
    assert any(line.startswith("validation, your data: balanced ") for line in lines)
    assert any(line.startswith("validation, replayed general data: balanced ")
               for line in lines)
    report = json.loads((out / "training.json").read_text())
    assert report["replay"]["ratio"] == 1.0 and report["start"]["source"] == "shipped"
    user, replay = report["validation"]["user"], report["validation"]["replay"]
    assert user["n"] == report["data"]["user_validation_examples"]
    assert replay["n"] == report["replay"]["validation"]
    for scores in (user, replay):
        assert scores["yes_f1"] is not None and "interval" in scores
        assert scores["too_small"] is True  # a few dozen checks: flagged
    assert any("too small" in line for line in lines)
    assert set(report["validation"]["replay_by_family"]) == {"general"}
    assert report["notes"] and report["notes"][-1] == f"writing to {out}"


def test_replay_ratio_zero_and_from_scratch_opt_out(check_jsonl, tmp_path, monkeypatch):
    import mellea_local.datasets as datasets

    general = _general_file(tmp_path)
    monkeypatch.setattr(datasets, "training_path", lambda intrinsic, base: general)
    plain = train_adapter(config(check_jsonl, tmp_path / "a", max_steps=1, replay_ratio=0))
    assert plain.report["replay"] is None and plain.report["validation"]["replay"] is None
    fresh = train_adapter(config(check_jsonl, tmp_path / "b", max_steps=1, from_scratch=True))
    assert fresh.report["start"]["source"] == "scratch" and fresh.report["replay"] is None
    assert fresh.report["hyperparameters"]["rank"] == 32


def test_replay_asked_for_a_model_without_general_data_is_refused(check_jsonl, tmp_path):
    from mellea_local.errors import TrainingDataError

    with pytest.raises(TrainingDataError, match="no general training data is shipped"):
        train_adapter(config(check_jsonl, tmp_path / "lib", replay_ratio=1.0))
