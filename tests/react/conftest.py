"""``real_model`` tests here need SmolLM2-135M-Instruct in the model cache (deselected with a
one-line hint without it; see ``real_model_selection``)."""

from __future__ import annotations

import pytest
from real_model_selection import deselect_real_model_tests, report_deselected


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_real_model_tests(config, items)


def pytest_terminal_summary(terminalreporter) -> None:
    report_deselected(terminalreporter)
