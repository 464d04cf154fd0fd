"""Checkpoints a killed run resumes from with no step lost or repeated, and that are checked
before anything is resumed from them.

A checkpoint is the trainable weights (safetensors), the optimizer state, the step reached and
the key of the run (data hash and every setting that changes the trajectory). The batch order
is a pure function of the seed and the step, and nothing random happens inside a step
(dropout 0), so resuming at step ``k`` computes exactly what the uninterrupted run computed
after ``k``.

Writing: every file is serialised in memory and written to a fresh temporary folder
(``output.fresh_folder``), fsynced, then the folder is renamed into place; the previous
checkpoint is moved aside first and removed only after. A kill or a full disk at any point
leaves the last good checkpoint whole (a full disk is ``TrainingDiskFullError`` naming the
path: torch's own writer reported it as ``[enforce fail at inline_container.cc:672]``).

Reading (``load_checkpoint``): the state's step is a whole number within the run, the weights
are exactly the adapter's tensors (names and shapes) and finite, the optimizer state loads;
anything else is ``CheckpointError`` naming the file, and nothing is resumed.
"""

from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path
from typing import Any

import torch

from mellea_local.errors import CheckpointError, TrainingError
from mellea_local.inputs import loads_json, regular_file_problem
from mellea_local.training.output import (
    fresh_folder,
    fsync_folder,
    output_error,
    refuse_link,
    remove_own,
    write_durable,
)

STATE = "state.json"
WEIGHTS = "trainable.safetensors"
OPTIMIZER = "optimizer.pt"
FILES = (WEIGHTS, OPTIMIZER, STATE)


def trainable_tensors(model: Any) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().contiguous()
            for n, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(folder: Path, model: Any, optimizer: Any, state: dict[str, Any]) -> None:
    from safetensors.torch import save

    parent = folder.parent
    old = folder.with_name(folder.name + ".old")
    refuse_link(folder, "the checkpoint folder")
    refuse_link(old, "the previous checkpoint's folder")
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    files = {WEIGHTS: save(trainable_tensors(model)), OPTIMIZER: buffer.getvalue(),
             STATE: (json.dumps(state, indent=1) + "\n").encode("utf-8")}
    tmp = fresh_folder(parent, f".{folder.name}-")
    try:
        for name, data in files.items():
            write_durable(tmp, name, data, final=folder)
        fsync_folder(tmp)
        if old.exists():
            remove_own(old, FILES)
        if folder.exists():
            os.rename(folder, old)
        os.rename(tmp, folder)
        fsync_folder(parent)
    except OSError as exc:
        remove_own(tmp, FILES)
        raise output_error(exc, folder, "save the checkpoint") from None
    except BaseException:
        remove_own(tmp, FILES)
        raise
    remove_own(old, FILES)


def remove_checkpoint(folder: Path) -> None:
    """Remove a checkpoint (its files only; anything else someone put there stays)."""
    remove_own(folder, FILES)
    remove_own(folder.with_name(folder.name + ".old"), FILES)


def _problem(folder: Path, text: str) -> CheckpointError:
    return CheckpointError(
        f"The checkpoint in {str(folder)!r} cannot be resumed: {text}. Nothing was resumed; "
        "pass --restart (restart=True) to discard it and train from the start.")


def _read_state(folder: Path, key: str, total: int) -> dict[str, Any]:
    try:
        state = loads_json((folder / STATE).read_bytes(), STATE)
    except (OSError, ValueError) as exc:
        raise _problem(folder, f"{STATE} is unreadable ({exc})") from None
    if not isinstance(state, dict):
        raise _problem(folder, f"{STATE} is not a JSON object")
    if state.get("key") != key:
        raise TrainingError(
            f"The checkpoint in {str(folder)!r} belongs to a different run (other data or "
            "settings); resuming it would mix two trainings. Pass --restart (restart=True) to "
            "discard it, or rerun with the original data and settings.")
    step = state.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= total:
        raise _problem(folder, f"its step {step!r} is not a whole number within this run's "
                               f"0..{total} steps")
    losses = state.get("losses")
    if not isinstance(losses, list) or len(losses) != step or not all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in losses):
        raise _problem(folder, f"its loss history is not {step} finite numbers")
    if not isinstance(state.get("validation"), list):
        raise _problem(folder, "its validation history is not a list")
    return state


def _check_weights(folder: Path, weights: dict[str, torch.Tensor],
                   params: dict[str, torch.Tensor]) -> None:
    missing = sorted(set(params) - set(weights))
    extra = sorted(set(weights) - set(params))
    if missing or extra:
        what = (f"it lacks {len(missing)} of the adapter's tensors (e.g. {missing[0]})"
                if missing else f"it holds {len(extra)} tensors this adapter has not "
                                f"(e.g. {extra[0]})")
        raise _problem(folder, what)
    for name, tensor in weights.items():
        if tuple(tensor.shape) != tuple(params[name].shape):
            raise _problem(folder, f"tensor {name} has shape {tuple(tensor.shape)}, the "
                                   f"adapter's is {tuple(params[name].shape)}")
        if not torch.isfinite(tensor).all():
            raise _problem(folder, f"tensor {name} holds NaN or infinite values")


def load_checkpoint(folder: Path, model: Any, optimizer: Any, key: str,
                    total: int) -> dict[str, Any] | None:
    """The saved state after restoring weights and optimizer, or None without a checkpoint.
    Everything is validated before the model or optimizer is touched."""
    if not (folder / STATE).exists():
        old = folder.with_name(folder.name + ".old")  # killed between the two renames
        if not (old / STATE).exists():
            return None
        folder = old
    for name in FILES:
        problem = regular_file_problem(folder / name)
        if problem is not None:
            raise _problem(folder, f"{name} {problem}")
    from safetensors.torch import load_file

    state = _read_state(folder, key, total)
    try:
        weights = load_file(str(folder / WEIGHTS))
    except Exception as exc:  # safetensors' own error type for a torn or foreign file
        raise _problem(folder, f"{WEIGHTS} is not a readable safetensors file ({exc})") from None
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    _check_weights(folder, weights, params)
    try:
        saved = torch.load(folder / OPTIMIZER, weights_only=True)
    except Exception as exc:  # torch's unpickler raises many types for a bad file
        raise _problem(folder, f"{OPTIMIZER} cannot be read ({exc})") from None
    before = optimizer.state_dict()
    with torch.no_grad():
        originals = {name: params[name].detach().clone() for name in weights}
        for name, tensor in weights.items():
            params[name].copy_(tensor)
    problem = None
    try:
        optimizer.load_state_dict(saved)
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        problem = f"{OPTIMIZER} does not fit this run's optimizer ({exc})"
    else:
        if any(torch.is_tensor(v) and not torch.isfinite(v).all()
               for group in optimizer.state.values() for v in group.values()):
            problem = f"{OPTIMIZER} holds NaN or infinite values"
    if problem is not None:
        with torch.no_grad():  # leave the fresh model and optimizer as they were
            for name, tensor in originals.items():
                params[name].copy_(tensor)
        optimizer.load_state_dict(before)
        raise _problem(folder, problem)
    return state
