"""Silence the libraries' load-time chatter that a user of ours cannot act on.

Loading a model drew transformers' "Loading weights" progress bar (over a chat screen, too),
and loading an adapter made PEFT call a transformers property deprecated in v6, a
``FutureWarning`` on every command. Only these two, and only while a load runs: download
bars (huggingface_hub's own), other warnings and all of our own messages still show.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

_DROPPED_BARS = ("Loading weights",)
_DROPPED_WARNING = r"`is_gradient_checkpointing` is deprecated"


def _drop_loading_bars(factory: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if str(kwargs.get("desc", "")).startswith(_DROPPED_BARS):
        kwargs = {**kwargs, "disable": True}
    return factory(*args, **kwargs)


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Run a model or adapter load without the two messages above."""
    from transformers.utils import logging as hf_logging

    set_hook = getattr(hf_logging, "set_tqdm_hook", None)  # transformers >= 5.x
    previous = set_hook(_drop_loading_bars) if set_hook else None
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_DROPPED_WARNING, category=FutureWarning)
            yield
    finally:
        if set_hook:
            set_hook(previous)
