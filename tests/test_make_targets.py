"""``make lint`` / ``make test`` lint the project's own files, never a user's scratch files.

A new user's scratch scripts in the clone made ``ruff check .`` report 80 errors and failed
``make test``; the targets now name the tracked source folders, and every tracked Python file
lies under one of them (so a new folder of ours cannot slip out of the lint).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _ruff_line(target: str) -> list[str]:
    # -n prints the recipes without running them (the venv stamp's recipe too, when absent).
    out = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True,
                         text=True, check=True).stdout
    [line] = [ln for ln in out.splitlines() if "ruff check" in ln]
    return line.split("ruff check", 1)[1].split()


@pytest.mark.parametrize("target", ["lint", "test"])
def test_lint_names_the_project_folders_not_the_whole_clone(target):
    paths = _ruff_line(target)
    assert "." not in paths and "./" not in paths
    assert paths == ["mellea_local", "tests", "scripts", "benchmarks", "setup.py"]
    for path in paths:
        assert (ROOT / path).exists(), path


def test_every_tracked_python_file_is_linted():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "*.py"], capture_output=True,
                           text=True, check=True).stdout.split()
    paths = _ruff_line("lint")
    outside = [f for f in files if not any(f == p or f.startswith(p + "/") for p in paths)]
    assert outside == []


def test_a_scratch_file_in_the_clone_is_not_linted(tmp_path):
    """What ``make lint`` runs, run on a copy of the layout with a user's bad scratch file."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed")
    for path in _ruff_line("lint"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        if path.endswith(".py"):
            (tmp_path / path).write_text("X = 1\n")
        else:
            (tmp_path / path).mkdir()
            (tmp_path / path / "ok.py").write_text("X = 1\n")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "scratch.py").write_text("import os, sys\nx=1;  y = 2\n")  # F401, E401, E702
    checked = subprocess.run([ruff, "check", *_ruff_line("lint")], cwd=tmp_path,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout
    whole = subprocess.run([ruff, "check", "."], cwd=tmp_path, capture_output=True, text=True)
    assert whole.returncode == 1 and "scratch.py" in whole.stdout  # what `ruff check .` did
