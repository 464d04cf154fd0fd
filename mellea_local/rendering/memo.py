"""Small per-tokenizer memos of the two costly prompt-building steps: rendering and encoding.

Why: every requirement check of a turn (and every intrinsic call on it) renders the same
conversation through the chat template and tokenises the same text again. At 1k tokens that is
~2 ms of Jinja and ~1.5 ms of BPE per check (both linear in the context), against a check
forward of a few milliseconds on a small model: the largest part of our per-call overhead.
Remembering the last few results turns repeats into a dictionary lookup.

Exactness: a hit returns what the call returned the first time for an equal input (the text,
the tokenizer object, its vocabulary size, its chat template, every argument); anything that
cannot be keyed exactly (arguments that are not plain JSON) is not memoised. Entries are
bounded (``SIZE`` per tokenizer, least recently used dropped) and die with their tokenizer.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

SIZE = 64
"""Entries kept per tokenizer and kind (a few conversations' worth of prompts)."""

MIN_TEXT = 256
"""Shorter texts encode in microseconds: not worth an entry."""

_memos: weakref.WeakKeyDictionary[Any, dict[str, OrderedDict[Any, Any]]] = (
    weakref.WeakKeyDictionary())
_lock = threading.Lock()


def _table(tokenizer: Any, kind: str) -> OrderedDict[Any, Any] | None:
    try:
        tables = _memos.get(tokenizer)
        if tables is None:
            tables = _memos[tokenizer] = {}
    except TypeError:  # not weak-referenceable / not hashable: no memo
        return None
    return tables.setdefault(kind, OrderedDict())


def memoised(tokenizer: Any, kind: str, key: Any, compute: Callable[[], T]) -> T:
    """``compute()``, or its remembered result for an equal ``key`` on this tokenizer."""
    with _lock:
        table = _table(tokenizer, kind)
        if table is not None and key in table:
            table.move_to_end(key)
            return table[key]  # type: ignore[no-any-return]
    value = compute()
    if table is not None:
        with _lock:
            table[key] = value
            while len(table) > SIZE:
                table.popitem(last=False)
    return value


def vocab_size(tokenizer: Any) -> int | None:
    """The tokenizer's size with added tokens (a key part: adding a token changes encodings)."""
    try:
        return len(tokenizer)
    except TypeError:
        return None


def json_key(*parts: Any) -> str | None:
    """An exact key for plain-JSON arguments, or None when some part is not plain JSON."""
    try:
        return json.dumps(parts, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None
