"""The one learning-rate schedule (training.schedule): warm-up, floor, decay shapes."""

from __future__ import annotations

import pytest

from mellea_local.training.schedule import lr_at


@pytest.mark.parametrize("decay", ["linear", "cosine"])
def test_warms_up_then_decays_to_a_tenth_of_the_peak(decay):
    total, peak = 200, 1e-3
    lrs = [lr_at(step, total, peak, decay) for step in range(total)]
    warm = total // 20
    assert lrs[0] == pytest.approx(peak / warm)
    assert lrs[warm - 1] == pytest.approx(peak)
    assert lrs[warm] == pytest.approx(peak)
    assert all(a >= b for a, b in zip(lrs[warm:], lrs[warm + 1:], strict=False))
    assert lrs[-1] == pytest.approx(0.1 * peak, rel=0.05)


def test_linear_and_cosine_differ_only_in_the_decay():
    total, peak = 100, 1.0
    assert [lr_at(s, total, peak) for s in range(5)] == [lr_at(s, total, peak, "cosine")
                                                         for s in range(5)]
    middle = (5 + total) // 2
    assert lr_at(middle, total, peak) == pytest.approx(1.0 - 0.9 * 0.5, abs=0.01)
    assert lr_at(middle, total, peak, "cosine") == pytest.approx(0.55, abs=0.02)
