"""Where ``train_adapter`` writes, on the embedded model and real PEFT adapters: never the
shipped library by default, no planted symlink followed, one run per output folder, the
user's other files kept, a full disk a typed error that keeps the last good checkpoint."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import mellea_local.training.output as output
from mellea_local.cli import app
from mellea_local.errors import (
    TrainingDiskFullError,
    TrainingLockedError,
    TrainingOutputError,
)
from mellea_local.training import TrainConfig, train_adapter
from mellea_local.training.loop import CHECKPOINT

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_TINY = ROOT / "adapters" / "requirement-check" / "mellea-tiny-chat" / "alora"
BASE = ("requirement-check", "mellea-tiny-chat")


def config(data, root, **kw) -> TrainConfig:
    base = dict(data=str(data), model="embedded", out_root=None if root is None else str(root),
                epochs=1, batch_size=4, lr=1e-3, rank=4, alpha=8, seed=3, checkpoint_every=2,
                threads=1, max_steps=3)
    base.update(kw)
    return TrainConfig(**base)


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


class Killed(Exception):
    pass


def no_model(monkeypatch) -> None:
    import mellea_local.training.loop as loop

    monkeypatch.setattr(loop, "_load_base", lambda *a, **k: pytest.fail("loaded a model"))


def test_the_default_out_is_the_user_library_and_the_shipped_one_is_untouched(
        check_jsonl, tmp_path, monkeypatch):
    monkeypatch.setenv("MELLEA_LOCAL_HOME", str(tmp_path / "home"))
    before = digest(SHIPPED_TINY)
    said: list[str] = []
    result = train_adapter(config(check_jsonl, None), say=said.append)
    assert result.path == tmp_path / "home" / "adapters" / Path(*BASE) / "alora"
    assert f"writing to {result.path}" in said
    assert digest(SHIPPED_TINY) == before
    assert not (result.path.parent / "alora.lock").exists()


def test_a_default_out_that_is_the_shipped_library_is_refused(check_jsonl, tmp_path,
                                                              monkeypatch):
    no_model(monkeypatch)
    monkeypatch.setenv("MELLEA_LOCAL_HOME", str(ROOT))  # -> ROOT/adapters, the shipped one
    with pytest.raises(TrainingOutputError, match="shipped with mellea-local"):
        train_adapter(config(check_jsonl, None))


def test_the_shipped_library_is_written_only_when_named(check_jsonl, tmp_path, monkeypatch):
    lib = tmp_path / "shipped"
    lib.mkdir()
    monkeypatch.setattr(output, "shipped_library_roots", lambda: (lib.resolve(),))
    assert output.is_shipped_library(lib / "requirement-check")
    with pytest.raises(TrainingOutputError, match="shipped"):
        output.check_out_root(str(lib), named=False)
    result = train_adapter(config(check_jsonl, lib, max_steps=1))  # named: allowed
    assert result.path == lib / Path(*BASE) / "alora"


def test_an_empty_out_is_refused_and_nothing_lands_in_the_working_folder(
        check_jsonl, tmp_path, monkeypatch):
    no_model(monkeypatch)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", str(check_jsonl), "--out", "", "--threads", "1"])
    assert result.exit_code == 1
    assert "--out '' is empty" in result.output
    assert list(tmp_path.iterdir()) == []


def test_an_out_that_cannot_be_written_is_refused_before_the_model_loads(
        check_jsonl, tmp_path, monkeypatch):
    no_model(monkeypatch)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(TrainingOutputError, match="Cannot create the output folder"):
        train_adapter(config(check_jsonl, tmp_path / "a-file" / "lib"))


def test_a_planted_saving_symlink_does_not_redirect_the_adapter(check_jsonl, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("mine")
    parent = tmp_path / "lib" / Path(*BASE)
    parent.mkdir(parents=True)
    (parent / "alora.saving").symlink_to(victim, target_is_directory=True)
    (parent / "alora.checkpoint.writing").symlink_to(victim, target_is_directory=True)
    result = train_adapter(config(check_jsonl, tmp_path / "lib", checkpoint_every=1))
    assert [p.name for p in victim.iterdir()] == ["precious.txt"]
    assert (parent / "alora.saving").is_symlink()  # not ours: left as it was
    assert (result.path / "adapter_model.safetensors").is_file()


@pytest.mark.parametrize("name", ["alora", f"alora{CHECKPOINT}", "alora.lock"])
def test_a_symlink_where_training_writes_is_refused(check_jsonl, tmp_path, monkeypatch, name):
    no_model(monkeypatch)
    victim = tmp_path / "victim"
    victim.mkdir()
    parent = tmp_path / "lib" / Path(*BASE)
    parent.mkdir(parents=True)
    (parent / name).symlink_to(victim, target_is_directory=True)
    with pytest.raises(TrainingOutputError, match="symlink that training did not create"):
        train_adapter(config(check_jsonl, tmp_path / "lib"))
    assert list(victim.iterdir()) == []


def test_a_second_run_into_the_same_out_is_refused_naming_the_holder(check_jsonl, tmp_path):
    lib = tmp_path / "lib"
    ckpt = lib / Path(*BASE) / f"alora{CHECKPOINT}"
    seen: list[BaseException] = []

    def second_run(step: int, loss: float) -> None:
        if step == 3:  # the first run checkpointed at step 2 and holds the lock
            try:
                train_adapter(config(check_jsonl, lib, max_steps=5), restart=True)
            except TrainingLockedError as exc:
                seen.append(exc)
            assert json.loads((ckpt / "state.json").read_text())["step"] == 2
            raise Killed

    with pytest.raises(Killed):
        train_adapter(config(check_jsonl, lib, max_steps=5), on_step=second_run)
    [exc] = seen
    assert f"pid {os.getpid()}" in str(exc) and exc.holder
    assert json.loads((ckpt / "state.json").read_text())["step"] == 2  # survived
    resumed = train_adapter(config(check_jsonl, lib, max_steps=5))  # the lock went with it
    assert resumed.report["steps"] == 5


def test_an_out_holding_the_users_files_keeps_them(check_jsonl, tmp_path):
    folder = tmp_path / "lib" / Path(*BASE) / "alora"
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("my notes")
    (folder / "results").mkdir()
    (folder / "results" / "eval.jsonl").write_text("{}\n")
    result = train_adapter(config(check_jsonl, tmp_path / "lib"), restart=True)
    assert (folder / "notes.txt").read_text() == "my notes"
    assert (folder / "results" / "eval.jsonl").is_file()
    assert {"adapter_model.safetensors", "adapter_config.json", "io.yaml", "training.json"} <= {
        p.name for p in result.path.iterdir()}
    again = train_adapter(config(check_jsonl, tmp_path / "lib", max_steps=1))  # replaces ours
    assert again.report["steps"] == 1 and (folder / "notes.txt").is_file()


def test_a_checkpoint_folder_holding_the_users_files_is_refused_not_emptied(
        check_jsonl, tmp_path, monkeypatch):
    no_model(monkeypatch)
    ckpt = tmp_path / "lib" / Path(*BASE) / f"alora{CHECKPOINT}"
    ckpt.mkdir(parents=True)
    (ckpt / "mine.txt").write_text("also mine")
    with pytest.raises(TrainingOutputError, match=r"holds files training did not write "
                                                  r"\(mine.txt\)"):
        train_adapter(config(check_jsonl, tmp_path / "lib"), restart=True)
    assert (ckpt / "mine.txt").read_text() == "also mine"


def _disk_fills_after(monkeypatch, calls: int) -> None:
    real = output._write_all
    count = {"n": 0}

    def write_all(fd: int, data: bytes) -> None:
        count["n"] += 1
        if count["n"] > calls:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, data)

    monkeypatch.setattr(output, "_write_all", write_all)


def test_a_full_disk_at_a_checkpoint_is_typed_and_keeps_the_last_good_one(
        check_jsonl, tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    ckpt = lib / Path(*BASE) / f"alora{CHECKPOINT}"
    _disk_fills_after(monkeypatch, 3)  # the step-2 checkpoint's 3 files, then the disk is full
    with pytest.raises(TrainingDiskFullError) as info:
        train_adapter(config(check_jsonl, lib, max_steps=5))
    assert "disk space" in str(info.value) and str(ckpt) in str(info.value)
    assert info.value.path == str(ckpt / "trainable.safetensors")
    assert json.loads((ckpt / "state.json").read_text())["step"] == 2
    assert not list(ckpt.parent.glob(".alora*"))  # no temporary folder left behind
    monkeypatch.undo()
    whole = train_adapter(config(check_jsonl, tmp_path / "whole", max_steps=5))
    resumed = train_adapter(config(check_jsonl, lib, max_steps=5))
    assert resumed.report["loss_per_step"] == whole.report["loss_per_step"]


def test_a_full_disk_writing_the_adapter_leaves_no_half_adapter(check_jsonl, tmp_path,
                                                                monkeypatch):
    lib = tmp_path / "lib"
    _disk_fills_after(monkeypatch, 3 + 1)  # one checkpoint, then the adapter's first file
    with pytest.raises(TrainingDiskFullError, match="disk space"):
        train_adapter(config(check_jsonl, lib, max_steps=3))
    parent = lib / Path(*BASE)
    assert not (parent / "alora").exists()
    assert json.loads((parent / f"alora{CHECKPOINT}" / "state.json").read_text())["step"] == 2
