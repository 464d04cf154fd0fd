"""transformers ``generate`` kwargs -> llama-server sampling fields, transformers' order.

Greedy (``do_sample`` off, the default) is ``temperature: 0``: llama-server then takes the
argmax of the raw logits, which is what transformers' greedy search takes, so greedy outputs
are token-identical up to float ties. Sampling maps temperature, top-k (transformers' default
50), top-p and min-p, applied in transformers' order (temperature first), and the seed; the
random streams differ, so sampled texts are not the same as ``LocalHFBackend``'s for a seed.
Every other llama.cpp sampler is switched off (repeat/presence/frequency penalties, DRY, XTC).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NEUTRAL = {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
           "dry_multiplier": 0.0, "xtc_probability": 0.0, "typical_p": 1.0, "min_p": 0.0,
           "top_p": 1.0, "top_k": 0, "n_probs": 0, "post_sampling_probs": False}


def sampling_body(gen_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling part of a ``/completion`` body for these generate kwargs."""
    body: dict[str, Any] = dict(NEUTRAL)
    if not gen_kwargs.get("do_sample"):
        body["temperature"] = 0.0
        return body
    body["temperature"] = float(gen_kwargs.get("temperature", 1.0))
    body["top_k"] = int(gen_kwargs.get("top_k", 50) or 0)
    body["top_p"] = float(gen_kwargs.get("top_p", 1.0))
    body["min_p"] = float(gen_kwargs.get("min_p") or 0.0)
    body["samplers"] = ["temperature", "top_k", "top_p", "min_p"]
    if gen_kwargs.get("seed") is not None:
        body["seed"] = int(gen_kwargs["seed"])
    return body
