"""Which labelled files ``bench --only accuracy`` scores: the four shipped evaluation splits.

One accuracy figure on the data a checker was trained beside says little about the checks a user
writes, so a real ``--model`` is scored on four splits shipped under
``benchmarks/data/requirement-check/`` (or the wheel's bundled copy, ``mellea_local.datasets``):

- ``held-out``: ``<base>.jsonl``, the training families in phrasings and words never trained on;
- ``held-out-families``: ``<base>.families.jsonl``, requirement types never in training;
- ``user-style``: ``user-style.jsonl``, hand-written realistic checks, labels decided by reading
  (one file for every model: nothing in it depends on a base model);
- ``user-style-2``: ``user-style-2.jsonl``, a second, smaller hand-written set, written before
  the routing patterns of ``requirements.verify`` were broadened (their out-of-sample check).

``--split`` picks some (default: every one that is present; an absent one is one line in the
report). ``--dataset FILE`` scores that file alone instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mellea_local.core.backend import REQUIREMENT_CHECK
from mellea_local.datasets import dataset_path, held_out_path
from mellea_local.errors import BenchConfigError
from mellea_local.launch import EMBEDDED

SPLITS = ("held-out", "held-out-families", "user-style", "user-style-2")
USER_STYLE_FILE = "user-style.jsonl"
USER_STYLE_2_FILE = "user-style-2.jsonl"
_USER_FILES = {"user-style": USER_STYLE_FILE, "user-style-2": USER_STYLE_2_FILE}
SYNTHETIC = "synthetic"
"""The split name of the embedded model's synthetic held-out set (no file)."""

WHAT = {
    "held-out": "held-out phrasings and words of the trained families",
    "held-out-families": "requirement types never in training",
    "user-style": "hand-written realistic checks, labels decided by reading",
    "user-style-2": "a second hand-written set, written before the routing patterns",
    SYNTHETIC: "the embedded model's synthetic held-out set",
}


@dataclass(frozen=True)
class Split:
    """One labelled file to score, and what it measures."""

    name: str
    path: Path
    what: str


def base_name(model: str) -> str:
    """The base model name a registered name or a folder stands for (the files' prefix)."""
    from mellea_local.adapters.library import base_model_name
    from mellea_local.models import MODELS

    return MODELS[model].base_name if model in MODELS else base_model_name(model)


def split_path(name: str, base: str,
               locate: Callable[[str], Path] | None = None) -> Path:
    """Where split ``name`` of base model ``base`` is (it may not exist)."""
    files = {"held-out": f"{base}.jsonl", "held-out-families": f"{base}.families.jsonl",
             **_USER_FILES}
    if name not in files:
        raise BenchConfigError(f"--split {name}: no such split; use one of "
                               f"{', '.join(SPLITS)}.")
    if locate is not None:
        return locate(files[name])
    if name in _USER_FILES:
        return dataset_path(REQUIREMENT_CHECK, _USER_FILES[name])
    return held_out_path(REQUIREMENT_CHECK, base,
                         None if name == "held-out" else "families")


def accuracy_splits(
    model: str | None, dataset: Path | None, wanted: tuple[str, ...] = (), *,
    locate: Callable[[str], Path] | None = None,
) -> tuple[list[Split], dict[str, str]]:
    """(the splits to score, ``{split: why it is left out}``), before any model loads.

    ``--dataset`` is one split of its own. Without ``--model`` (or with ``embedded``) and no
    ``--split``, the list is empty: the synthetic set is scored. A split named with ``--split``
    that is absent is an error naming its path; an absent default one is a note.
    ``locate`` maps a file name to a path (tests); default: the shipped data.
    """
    unknown = [w for w in wanted if w not in SPLITS]
    if unknown:
        raise BenchConfigError(f"--split {', '.join(unknown)}: no such split; use one of "
                               f"{', '.join(SPLITS)}.")
    if dataset is not None:
        if wanted:
            raise BenchConfigError(
                "Pass --split (shipped evaluation splits) or --dataset (your own file), not "
                "both.")
        return [Split(dataset.stem or "dataset", dataset, f"--dataset {dataset}")], {}
    embedded = model in (None, EMBEDDED)
    if embedded and not wanted:
        return [], {}
    base = "mellea-tiny-chat" if embedded else base_name(model or "")
    found, missing = [], {}
    for name in wanted or SPLITS:
        path = split_path(name, base, locate)
        if path.is_file():
            found.append(Split(name, path, WHAT[name]))
        elif wanted:
            raise BenchConfigError(
                f"--split {name}: no file at {path} for {base}; leave out --split to score "
                "the splits that are there, or pass --dataset FILE.")
        else:
            maker = ("scripts/make_ifeval_checks.py" if name == "held-out-families"
                     else "scripts/make_check_dataset.py")
            missing[name] = f"not shipped for {base} ({path}; made by {maker}); skipped."
    return found, missing
