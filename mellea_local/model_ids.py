"""Naming a model, and how long a context it reads.

``ModelIdentifier`` is the peer library's way to name one model across providers; here only
the Hugging Face name matters (a hub id or a local folder). Its ``context_length``, when set,
bounds what a ``ChatContext(model_id=...)`` shows the model; a plain id string never does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ModelIdentifier", "get_context_length"]

# config.json keys that hold a model's context length, most specific first.
_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


@dataclass(frozen=True)
class ModelIdentifier:
    """One model's names; ``context_length`` is its context window in tokens, if known."""

    hf_model_name: str | None = None
    ollama_name: str | None = None
    context_length: int | None = None


def get_context_length(model: ModelIdentifier | str | None) -> int | None:
    """The context window of ``model`` in tokens, or None when it is not known offline.

    A ``ModelIdentifier`` gives its ``context_length``; a local model folder gives the length
    its ``config.json`` declares. Hub ids are not looked up (nothing is downloaded).
    """
    if isinstance(model, ModelIdentifier):
        return model.context_length
    if not isinstance(model, str):
        return None
    config = Path(model) / "config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    for key in _LENGTH_KEYS:
        value = data.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None
