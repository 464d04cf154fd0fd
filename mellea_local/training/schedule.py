"""The learning-rate schedule of every training run here (``mellea-local train`` and the
embedded model's script): one warm-up rule, one floor, the decay's shape named."""

from __future__ import annotations

import math
from typing import Literal

Decay = Literal["linear", "cosine"]


def lr_at(step: int, total: int, peak: float, decay: Decay = "linear") -> float:
    """Linear warm-up over the first 5 % of ``total`` steps, then ``decay`` down to 10 % of
    ``peak`` at the last step: ``linear`` for adapter training (``mellea-local train``),
    ``cosine`` for the embedded model's recipe (``scripts/train_embedded.py``)."""
    warm = max(1, total // 20)
    if step < warm:
        return peak * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    if decay == "cosine":
        return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
    return peak * (1.0 - 0.9 * progress)
