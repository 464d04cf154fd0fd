"""The training corpus (issue 41): bad data, outputs, starts, checkpoints, threads and faults
given to ``train_adapter``, each ending in a typed ``MelleaLocalError`` that names the input
and says what to do, or valid and trained (``error=None``), under a time bound (a hang fails
its case). Most cases are refused before the embedded model loads; the rest train a step or
two of it. After every case no lock file is left behind.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from bounded import run_bounded
from safetensors.torch import load_file, save_file

from mellea_local.errors import (
    CheckpointError,
    InitAdapterError,
    MelleaLocalError,
    ThreadCountError,
    TrainingDataError,
    TrainingDiskFullError,
    TrainingDivergedError,
    TrainingLockedError,
    TrainingOutputError,
)
from mellea_local.training import TrainConfig, train_adapter
from mellea_local.training.output import OutputLock

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_TINY = ROOT / "adapters" / "requirement-check" / "mellea-tiny-chat" / "alora"
PARENT = Path("lib") / "requirement-check" / "mellea-tiny-chat"
TIMEOUT_S = 120
FIX_WORDS = ("pass ", "fix", "keep ", "add ", "remove", "move", "lower", "decide", "flatten",
             "wait", "free ", "leave", "drop", "point", "save", "check ", "start", "rerun",
             "--restart", "--from-scratch")


def _row(i: int, label: bool = True, **extra: Any) -> str:
    return json.dumps({"messages": [{"role": "user", "content": f"Question {i}?"},
                                    {"role": "assistant", "content": f"Answer {i}."}],
                       "requirement": "Answer in one word.", "label": label, **extra},
                      ensure_ascii=False)


GOOD = [_row(i, i % 2 == 0) for i in range(16)]


@dataclass(frozen=True)
class Case:
    """``prepare(tmp)`` returns the config to train (and may plant files); ``error`` None
    means valid: ``valid(result)`` must hold."""

    prepare: Callable[[Path], TrainConfig]
    error: type[BaseException] | None = MelleaLocalError
    words: tuple[str, ...] = ()
    valid: Callable[[Any], bool] = lambda result: True
    patch: Callable[[pytest.MonkeyPatch], None] | None = None


def cfg(tmp: Path, lines: list[str] | None = None, **kw: Any) -> TrainConfig:
    data = tmp / "data.jsonl"
    if not data.exists():
        data.write_text("\n".join(GOOD if lines is None else lines) + "\n", encoding="utf-8")
    base = dict(data=str(data), model="embedded", out_root=str(tmp / "lib"), epochs=1,
                batch_size=4, max_steps=2, checkpoint_every=1, threads=1, from_scratch=True,
                rank=4, alpha=8)
    base.update(kw)
    return TrainConfig(**base)


def data_case(lines: list[str], error=TrainingDataError, *words: str, **kw: Any) -> Case:
    return Case(lambda tmp: cfg(tmp, lines, **kw), error, words)


CASES: dict[str, Case] = {
    # ----- data: read as check reads it ------------------------------------------------------
    "U+2028 and U+0085 inside strings (valid)": Case(
        lambda tmp: cfg(tmp, [_row(0, True, note="a\u2028b\u0085c"), *GOOD[1:]]), None,
        valid=lambda r: r.report["data"]["lines"] == 16),
    "a line nested 100k deep": data_case([*GOOD, "[" * 100_000 + "]" * 100_000],
                                         TrainingDataError, "line 17", "nests deeper"),
    "a key twice": data_case([*GOOD, _row(99)[:-1] + ', "label": false}'],
                             TrainingDataError, "line 17", "key 'label' twice"),
    "label and labels disagree": data_case([*GOOD, _row(99, True, labels=[False])],
                                           TrainingDataError, "line 17", "disagree"),
    "label and labels agree (valid)": Case(
        lambda tmp: cfg(tmp, [*GOOD, _row(99, True, labels=[True])]), None),
    "one check labelled both ways": data_case([*GOOD, _row(3, True)], TrainingDataError,
                                              "line 17", "line 4"),
    "duplicates (valid, counted)": Case(
        lambda tmp: cfg(tmp, GOOD + GOOD[:5]), None,
        valid=lambda r: r.report["data"]["duplicates_dropped"] == 5
        and "dropped 5 duplicate" in r.report["notes"][0]),
    "a training side of one class": data_case(
        [_row(i, i < 2) for i in range(8)], TrainingDataError, "training side", "['no']",
        validation=0.75, seed=0),
    "a FIFO": Case(lambda tmp: (os.mkfifo(tmp / "fifo"), cfg(tmp, data=str(tmp / "fifo")))[1],
                   TrainingDataError, ("FIFO",)),
    "/dev/zero": Case(lambda tmp: cfg(tmp, data="/dev/zero"), TrainingDataError,
                      ("character device",)),
    "a folder as data": Case(lambda tmp: cfg(tmp, data=str(tmp)), TrainingDataError,
                             ("is a folder",)),
    # ----- output ----------------------------------------------------------------------------
    "--out ''": Case(lambda tmp: cfg(tmp, out_root=""), TrainingOutputError, ("is empty",)),
    "--out below a file": Case(
        lambda tmp: ((tmp / "f").write_text("x"), cfg(tmp, out_root=str(tmp / "f" / "lib")))[1],
        TrainingOutputError, ("Cannot create",)),
    "a symlink at the adapter folder": Case(
        lambda tmp: _link(tmp, "alora"), TrainingOutputError, ("symlink",)),
    "a symlink at the checkpoint folder": Case(
        lambda tmp: _link(tmp, "alora.checkpoint"), TrainingOutputError, ("symlink",)),
    "a symlink at alora.saving (valid, not followed)": Case(
        lambda tmp: _link(tmp, "alora.saving"), None,
        valid=lambda r: not any((r.path.parent.parent.parent.parent / "victim").iterdir())),
    "the user's files in the checkpoint folder": Case(
        lambda tmp: (_plant(tmp, "alora.checkpoint/mine.txt"), cfg(tmp))[1],
        TrainingOutputError, ("mine.txt",)),
    "the user's files in the adapter folder (valid, kept)": Case(
        lambda tmp: (_plant(tmp, "alora/notes.txt"), cfg(tmp))[1], None,
        valid=lambda r: (r.path / "notes.txt").read_text() == "mine"),
    "the default out pointing at the shipped library": Case(
        lambda tmp: cfg(tmp, out_root=None), TrainingOutputError, ("shipped",),
        patch=lambda mp: mp.setenv("MELLEA_LOCAL_HOME", str(ROOT))),
    "a second run into a locked folder": Case(
        lambda tmp: cfg(tmp), TrainingLockedError, ("Another training run", "pid")),
    "a full disk at the first checkpoint": Case(
        lambda tmp: cfg(tmp), TrainingDiskFullError, ("disk space", "trainable.safetensors"),
        patch=lambda mp: mp.setattr("mellea_local.training.output._write_all", _no_space)),
    # ----- start -----------------------------------------------------------------------------
    "--init-from all NaN": Case(lambda tmp: _init(tmp, "nan"), InitAdapterError,
                                ("NaN or infinite",)),
    "--init-from wrong shapes": Case(lambda tmp: _init(tmp, "shape"), InitAdapterError,
                                     ("has shape (32, ", "needs (16, ")),
    "--init-from a rank of its own (given)": Case(
        lambda tmp: _init(tmp, "rank"), InitAdapterError, ("r 32 (this run: 4)",)),
    "--init-from the shipped aLoRA (valid)": Case(
        lambda tmp: cfg(tmp, from_scratch=False, rank=None, alpha=None,
                        init_from=str(SHIPPED_TINY), max_steps=1), None,
        valid=lambda r: r.report["hyperparameters"]["rank"] == 32),
    "--init-from and --from-scratch": Case(
        lambda tmp: cfg(tmp, init_from=str(SHIPPED_TINY)), MelleaLocalError, ("contradict",)),
    # ----- checkpoints -----------------------------------------------------------------------
    "a checkpoint at step -5": Case(lambda tmp: _checkpoint(tmp, step=-5), CheckpointError,
                                    ("step -5",)),
    "a checkpoint at step 10^9": Case(lambda tmp: _checkpoint(tmp, step=10**9),
                                      CheckpointError, ("step 1000000000",)),
    "a checkpoint of NaN weights": Case(lambda tmp: _checkpoint(tmp, weights="nan"),
                                        CheckpointError, ("NaN",)),
    "a checkpoint of no weights": Case(lambda tmp: _checkpoint(tmp, weights="empty"),
                                       CheckpointError, ("lacks",)),
    # ----- the run ---------------------------------------------------------------------------
    "a NaN loss": Case(lambda tmp: cfg(tmp), TrainingDivergedError, ("step 1",),
                       patch=lambda mp: mp.setattr("mellea_local.training.loop._loss",
                                                   _nan_loss)),
    "--threads 10000": Case(lambda tmp: cfg(tmp, threads=10_000), ThreadCountError,
                            ("--threads 10000", "may use")),
}


def _no_space(fd: int, data: bytes) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _nan_loss(logits: Any, rows: Any, table: Any) -> torch.Tensor:
    return logits.sum() * float("nan")


def _plant(tmp: Path, relative: str) -> None:
    path = tmp / PARENT / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("mine")


def _link(tmp: Path, name: str) -> TrainConfig:
    victim = tmp / "victim"
    victim.mkdir()
    (tmp / PARENT).mkdir(parents=True)
    (tmp / PARENT / name).symlink_to(victim, target_is_directory=True)
    return cfg(tmp)


def _init(tmp: Path, damage: str) -> TrainConfig:
    folder = tmp / "init"
    shutil.copytree(SHIPPED_TINY, folder)
    if damage == "nan":
        weights = load_file(str(folder / "adapter_model.safetensors"))
        save_file({k: torch.full_like(v, float("nan")) for k, v in weights.items()},
                  str(folder / "adapter_model.safetensors"))
    elif damage == "shape":
        config = json.loads((folder / "adapter_config.json").read_text())
        config["r"] = 16
        (folder / "adapter_config.json").write_text(json.dumps(config))
        return cfg(tmp, init_from=str(folder), from_scratch=False, rank=None, alpha=None)
    return cfg(tmp, init_from=str(folder), from_scratch=False,
               **({"rank": None, "alpha": None} if damage == "nan" else {}))


def _checkpoint(tmp: Path, *, step: int | None = None, weights: str | None = None
                ) -> TrainConfig:
    config = cfg(tmp, max_steps=4)
    with pytest.raises(_Stop):
        train_adapter(config, on_step=_stop_at_2)
    folder = tmp / PARENT / "alora.checkpoint"
    if step is not None:
        state = json.loads((folder / "state.json").read_text())
        state["step"] = step
        (folder / "state.json").write_text(json.dumps(state))
    if weights == "nan":
        tensors = load_file(str(folder / "trainable.safetensors"))
        save_file({k: torch.full_like(v, float("nan")) for k, v in tensors.items()},
                  str(folder / "trainable.safetensors"))
    elif weights == "empty":
        save_file({}, str(folder / "trainable.safetensors"))
    return config


class _Stop(Exception):
    pass


def _stop_at_2(step: int, loss: float) -> None:
    if step == 2:
        raise _Stop


@pytest.mark.parametrize("name", list(CASES))
def test_training_input(name, tmp_path, monkeypatch):
    case = CASES[name]
    if case.patch is not None:
        case.patch(monkeypatch)
    config = case.prepare(tmp_path)
    lock = None
    if name == "a second run into a locked folder":
        (tmp_path / PARENT).mkdir(parents=True)
        lock = OutputLock(tmp_path / PARENT, "alora.lock", {"data": "another run"}).__enter__()
    try:
        result, exc = run_bounded(lambda: train_adapter(config), TIMEOUT_S)
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)
    if case.error is None:
        assert exc is None, f"{name}: {type(exc).__name__}: {exc}"
        assert case.valid(result), name
    else:
        assert exc is not None, f"{name}: accepted silently"
        assert isinstance(exc, MelleaLocalError), f"raw {type(exc).__name__}: {exc}"
        assert isinstance(exc, case.error), f"{name}: {type(exc).__name__}: {exc}"
        message = str(exc)
        for word in case.words:
            assert word in message, (name, message)
        assert any(w in message.lower() for w in FIX_WORDS), f"no fix in: {message}"
    assert not list(tmp_path.rglob("*.lock")), "a lock file was left behind"


def test_the_training_corpus_is_big_enough():
    assert len(CASES) >= 30
    assert sum(c.error is None for c in CASES.values()) >= 6  # valid controls
