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

import math
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


class _NotPlain(Exception):
    """A part that is not plain JSON: the call is not memoised."""


def json_key(*parts: Any) -> tuple[Any, ...] | None:
    """An exact key for plain-JSON arguments, or None when some part is not plain JSON.

    A nested tuple, not a ``json.dumps`` text: the strings stay the same objects, whose hashes
    Python keeps, so keying a 4k-token conversation costs ~50 us instead of ~125 us (twice a
    check). Exact as the text was, and stricter: a dict, a list, ``1``, ``1.0`` and ``True``
    never key alike (each is tagged with its type), non-str dict keys and non-finite floats
    are not plain JSON.
    """
    try:
        return tuple(_plain(part) for part in parts)
    except _NotPlain:
        return None


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return value
    if kind is dict:
        try:
            items = sorted(value.items())  # keys are unique: values are never compared
        except TypeError:  # keys of mixed types
            raise _NotPlain from None
        out = []
        for k, v in items:
            if type(k) is not str:
                raise _NotPlain
            out.append((k, v if type(v) is str else _plain(v)))
        return (dict, tuple(out))
    if kind is list or kind is tuple:
        return (list, tuple([v if type(v) is str else _plain(v) for v in value]))
    if value is None or kind is bool or kind is int:
        return (kind, value)
    if kind is float and math.isfinite(value):
        return (float, value)
    if isinstance(value, str):  # a subclass: its text, as json.dumps would write it
        return str.__str__(value)
    if isinstance(value, dict | list | tuple):  # subclasses: as their plain forms
        return _plain(dict(value) if isinstance(value, dict) else list(value))
    raise _NotPlain
