"""Checkpoints a killed run resumes from with no step lost or repeated.

A checkpoint is the trainable weights (safetensors), the optimizer state, the step reached and
the key of the run (data hash and every setting that changes the trajectory). The batch order
is a pure function of the seed and the step, and nothing random happens inside a step
(dropout 0), so resuming at step ``k`` computes exactly what the uninterrupted run computed
after ``k``. Written to a temporary folder and renamed, so a kill mid-write leaves the
previous checkpoint whole.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from mellea_local.errors import TrainingError

STATE = "state.json"
WEIGHTS = "trainable.safetensors"
OPTIMIZER = "optimizer.pt"


def save_checkpoint(folder: Path, model: Any, optimizer: Any, state: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    tmp = folder.with_name(folder.name + ".writing")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    trainable = {n: p.detach().cpu().contiguous()
                 for n, p in model.named_parameters() if p.requires_grad}
    save_file(trainable, str(tmp / WEIGHTS))
    torch.save(optimizer.state_dict(), tmp / OPTIMIZER)
    (tmp / STATE).write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        os.rename(folder, old)
    os.rename(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(folder: Path, model: Any, optimizer: Any, key: str) -> dict[str, Any] | None:
    """The saved state after restoring weights and optimizer, or None without a checkpoint."""
    if not (folder / STATE).is_file():
        old = folder.with_name(folder.name + ".old")  # killed between the two renames
        if not (old / STATE).is_file():
            return None
        folder = old
    from safetensors.torch import load_file

    state = json.loads((folder / STATE).read_text(encoding="utf-8"))
    if state.get("key") != key:
        raise TrainingError(
            f"The checkpoint in {str(folder)!r} belongs to a different run (other data or "
            "settings); resuming it would mix two trainings. Pass --restart (restart=True) to "
            "discard it, or rerun with the original data and settings.")
    weights = load_file(str(folder / WEIGHTS))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, tensor in weights.items():
            params[name].copy_(tensor)
    optimizer.load_state_dict(torch.load(folder / OPTIMIZER, weights_only=True))
    return state
