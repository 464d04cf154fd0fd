"""Checks on what callers pass to public entry points (requirements, contexts, backends).

They run before any model work starts and sit below every stage (core types only), so the
intrinsics and the requirements stages share them. A requirement is recognised by shape (a
Component with a ``description``), not by importing the requirements stage.

Each check turns a silent wrong result into a typed error naming the argument: a plain string
where a list belongs used to run one check per character; ``None``, ``123`` or a blank
description ran, or failed deep inside with a raw ``TypeError``.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import re
import stat
from collections.abc import Iterable, Mapping
from typing import Any

from mellea_local.core.backend import Backend
from mellea_local.core.component import Component
from mellea_local.core.context import Context
from mellea_local.errors import InputTypeError, InvalidInputError

logger = logging.getLogger(__name__)


def _is_requirement(value: Any) -> bool:
    return isinstance(value, Component) and hasattr(value, "description")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def requirement_list(value: Any, argument: str, *, single_ok: bool) -> list[Any]:
    """The items of a requirements argument as a list.

    ``single_ok`` lets one ``str`` or ``Requirement`` stand for a list of one (``validate``
    takes either); otherwise a str is refused, since iterating it checks each character.
    """
    if type(value) in (list, tuple):  # the common case, without a Protocol check (~25 us)
        return list(value)
    if isinstance(value, str) or _is_requirement(value):
        if single_ok:
            return [value]
        raise InputTypeError(
            f"{argument} must be a list of requirements, got a single {type(value).__name__} "
            f"({_short(value)}); wrap it in a list: [{_short(value)}]."
        )
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise InputTypeError(
            f"{argument} must be a list of requirement descriptions (str) or Requirements, got "
            f"{type(value).__name__} ({_short(value)})."
        )
    return list(value)


def _blank(text: str) -> bool:
    return not text.strip()


def description_of(item: Any, argument: str, *, fn_ok: bool = False) -> str:
    """The text a judge reads for one item: a non-blank str or a Requirement's description.

    ``fn_ok`` says, in the error, that a validation_fn would do instead (``validate``).
    """
    if isinstance(item, str):  # first: a str is never a Requirement, and this is cheap
        if _blank(item):
            raise InvalidInputError(
                f"{argument} is {item!r}, a blank description nothing can judge; say what "
                "the output must satisfy, e.g. 'The response is in English.'."
            )
        return item
    if _is_requirement(item):
        text = item.description
        if text is None or _blank(text):
            what = ("neither a description nor a validation_fn, so nothing can check it; give "
                    "it one of the two" if fn_ok else
                    "no description for the adapter to judge; give it a non-blank description")
            raise InvalidInputError(f"{argument} is {item!r}, which has {what}.")
        return text
    raise InputTypeError(
        f"{argument} must be a requirement description (str) or a Requirement, got "
        f"{type(item).__name__} ({_short(item)})."
    )


def descriptions(value: Any, argument: str = "requirements") -> list[str]:
    """The descriptions of a list argument of adapter-judged requirements, each checked."""
    items = requirement_list(value, argument, single_ok=False)
    return [description_of(item, f"{argument}[{i}]") for i, item in enumerate(items)]


def check_context(value: Any, argument: str = "context") -> Context:
    if not isinstance(value, Context):
        raise InputTypeError(
            f"{argument} must be a Context (e.g. ChatContext() holding the conversation), got "
            f"{type(value).__name__}."
        )
    return value


def check_backend(value: Any, argument: str = "backend", *, needs: str | None = None) -> Any:
    """``value`` if it is a Backend (with the method ``needs``, when given)."""
    duck = isinstance(value, Backend) or hasattr(value, "generate_from_context")
    if not duck or (needs is not None and not hasattr(value, needs)):
        what = f"a backend with {needs}() (e.g. LocalHFBackend)" if needs else "a Backend"
        raise InputTypeError(
            f"{argument} must be {what}, got {type(value).__name__}; pass the backend first "
            "built, e.g. LocalHFBackend.embedded()."
        )
    return value


def check_format(value: Any, tool_calls: bool) -> bool:
    """Refuse a ``format`` that cannot constrain a generation; return whether tool calling
    stays on (a JSON-constrained output cannot also call tools, so format= turns it off).

    Backends read the format's JSON schema; anything but a pydantic model class used to fail
    deep inside with an ``AttributeError`` on ``model_json_schema``.
    """
    if value is None:
        return tool_calls
    if not (isinstance(value, type) and hasattr(value, "model_json_schema")):
        raise InputTypeError(
            f"format must be a pydantic BaseModel class (its JSON schema constrains the "
            f"output), got {value!r}; define `class Answer(BaseModel): ...` and pass "
            "format=Answer."
        )
    if tool_calls:
        logger.warning("format= constrains the output to JSON; tool calling is turned off")
    return False


MAX_JSON_DEPTH = 200
"""Deepest nesting of arrays and objects accepted in JSON we read from users' files (dataset
lines, adapter configs). Real data nests a few levels; Python's parser gives up near the
interpreter's recursion limit (~1,000) with a ``RecursionError`` that names nothing, and
anything nested close to that fails again later when it is written back out."""

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKETS = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON ``text`` (strings skipped), without
    recursion: a line nested 100,000 deep is measured, not a crash."""
    depth = deepest = 0
    for bracket in _JSON_BRACKETS.findall(_JSON_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


class _DuplicateKey(Exception):  # internal signal, turned into a JSONDecodeError below
    pass


def loads_json(text: str | bytes, what: str, *, unique_keys: bool = False) -> Any:
    """``json.loads(text)``, refusing JSON nested deeper than ``MAX_JSON_DEPTH``.

    Raises ``json.JSONDecodeError`` for text that is not JSON and for nesting too deep (a
    ``JSONDecodeError`` whose message names ``what`` and the limit), never ``RecursionError``:
    callers already turn a decode error into their own typed error for one line or one file.
    ``unique_keys`` also refuses an object holding a key twice (``json.loads`` keeps the last
    silently, so ``{"label": true, "label": false}`` would train on whichever came last).
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and json_depth(text) > MAX_JSON_DEPTH:
        raise json.JSONDecodeError(
            f"{what} nests deeper than {MAX_JSON_DEPTH} levels; flatten it", text, 0)
    try:
        if unique_keys:
            return json.loads(text, object_pairs_hook=_unique_pairs)
        return json.loads(text)
    except _DuplicateKey as exc:
        raise json.JSONDecodeError(
            f"{what} holds the key {exc.args[0]!r} twice; keep one", text, 0) from None
    except RecursionError:  # a depth json_depth miscounted (unbalanced text): still refused
        raise json.JSONDecodeError(
            f"{what} nests deeper than {MAX_JSON_DEPTH} levels; flatten it", text, 0) from None


MAX_NAME_LENGTH = 128
"""Longest adapter name: names key PEFT's module dicts, log lines and server requests."""


def check_name(value: Any, what: str) -> str:
    """``value`` if it is usable as a name: a non-empty str of at most ``MAX_NAME_LENGTH``
    printable characters without a path separator or surrounding spaces.

    A name with ``/`` or ``\\`` reads as a path wherever it is written (a file per adapter, a
    URL); NUL and other control or format characters (bidi marks) hide what a log says.
    """
    if not isinstance(value, str):
        raise InputTypeError(
            f"{what} must be a str, got {type(value).__name__} ({_short(value)}); pass e.g. "
            "'requirement-check_alora'.")
    problem = None
    if not value.strip():
        problem = "is empty or blank"
    elif len(value) > MAX_NAME_LENGTH:
        problem = f"has {len(value):,} characters (at most {MAX_NAME_LENGTH})"
    elif value != value.strip():
        problem = "has surrounding spaces"
    elif "/" in value or "\\" in value:
        problem = "holds a path separator"
    elif any(not ch.isprintable() for ch in value):
        bad = next(ch for ch in value if not ch.isprintable())
        problem = f"holds the non-printable character {bad!r}"
    if problem is not None:
        raise InvalidInputError(
            f"{what} {_short(value)} {problem}; use a short name of letters, digits, '-' and "
            "'_', such as 'requirement-check_alora'.")
    return value


def check_int(value: Any, argument: str, *, minimum: int, fix: str) -> int:
    """``value`` if it is an int (never a bool) of at least ``minimum``; else a typed error
    naming ``argument`` and saying ``fix``. ``1.5`` used to be stored and fail far away."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputTypeError(
            f"{argument} must be an int, got {type(value).__name__} ({_short(value)}); {fix}.")
    if value < minimum:
        raise InvalidInputError(f"{argument} is {value}, below {minimum}; {fix}.")
    return int(value)


def check_number(value: Any, argument: str, *, minimum: float, fix: str,
                 inclusive: bool = True) -> float:
    """``value`` if it is a finite real (never a bool) >= ``minimum`` (> when not
    ``inclusive``); else a typed error naming ``argument`` and saying ``fix``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputTypeError(
            f"{argument} must be a number, got {type(value).__name__} ({_short(value)}); {fix}.")
    below = value < minimum if inclusive else value <= minimum
    if not math.isfinite(value) or below:
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise InvalidInputError(f"{argument} is {value!r}; it must be finite and {bound}; {fix}.")
    return float(value)


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSONL text, split at ``\n`` only (a ``\r`` before it dropped).

    Not ``str.splitlines()``: it also splits at U+2028, U+2029, U+0085 and other separators
    that valid JSON may hold raw inside a string (``json.dumps(ensure_ascii=False)`` writes
    them so), which would break one line in two and shift every later line number. The one
    reader of JSONL lines: ``check``, ``bench`` and ``train`` split files with it.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def regular_file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be read as a data file, or None when it is a regular file.

    Asked with ``stat`` before any ``open``: opening a FIFO blocks until a writer comes, and
    a device such as ``/dev/zero`` reads forever; a folder is named as one.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist; pass an existing file"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a file; pass a file"
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else
            "a character device" if stat.S_ISCHR(mode) else
            "a block device" if stat.S_ISBLK(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    return f"is {kind}, which could block or never end; pass a regular file"
