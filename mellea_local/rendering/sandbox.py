"""Chat templates rendered in a bounded sandbox: a time and an output-size limit.

A chat template is code that came with a model file we did not write. transformers renders it
in jinja2's ``ImmutableSandboxedEnvironment``, which blocks attribute tricks but not work: two
nested loops over ``range(100000)`` ran for hours, ``"x" * 10**10`` asks for 10 GB. Here the
same template runs in a subclass of that environment with the same settings, filters and
globals (so the text is identical, a test compares them), plus:

- every loop iteration and every call ticks a counter; every ``TICK_EVERY`` ticks the time
  spent is compared with ``TIME_LIMIT_S``. Loops are ticked by a node the environment adds
  at the top of each ``{% for %}`` body when it parses a template, so a loop that writes
  nothing is bounded too;
- the text is produced chunk by chunk (``Template.generate``) and counted against
  ``OUTPUT_LIMIT``; ``*``, ``**``, ``+``, ``%``, ``~`` and the filters and string methods that
  multiply sizes (``replace``, ``center``, ``ljust`` ...) are checked *before* they run, so
  no single step allocates past the limit.

Exceeding either is a ``ChatTemplateError`` naming the limit and the fix. The cost for a
normal template is one counter increment per loop iteration and per call (measured on the
embedded template, 20 turns with tools: 0.49 ms against transformers' 0.48 ms per render;
renders are memoised besides, ``memo.py``).
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from mellea_local.errors import ChatTemplateError

TIME_LIMIT_S = 2.0
"""Seconds (wall clock) one render may take; a 100k-token conversation renders in about
0.1 s. Wall clock, not CPU time: the limit is what a user waits."""

OUTPUT_LIMIT = 16_000_000
"""Characters one render may produce (about 4M tokens, far beyond any model's context)."""

TICK_EVERY = 1024
_TICK = "__mellea_render_tick"
_CONCAT = "__mellea_render_concat"
_state = threading.local()


class _Budget:
    __slots__ = ("deadline", "output", "ticks")

    def __init__(self) -> None:
        self.deadline = time.monotonic() + TIME_LIMIT_S
        self.ticks = 0
        self.output = 0


def _over_time() -> ChatTemplateError:
    return ChatTemplateError(
        f"The chat template ran past its limit of {TIME_LIMIT_S:g} seconds while "
        "rendering: the template (which came with the model, not from mellea-local) loops "
        "without end or over far too much (e.g. nested loops over huge ranges). Fix the "
        "template or set tokenizer.chat_template to the model's original one.")


def _too_big(size: int, what: str) -> ChatTemplateError:
    return ChatTemplateError(
        f"The chat template would produce {size:,} characters ({what}), past the limit of "
        f"{OUTPUT_LIMIT:,}: the template (which came with the model, not from mellea-local) "
        "multiplies its text without bound. Fix the template or set tokenizer.chat_template "
        "to the model's original one.")


def _tick() -> None:
    budget: _Budget | None = getattr(_state, "budget", None)
    if budget is None:
        return
    budget.ticks += 1
    if budget.ticks % TICK_EVERY == 0 and time.monotonic() > budget.deadline:
        raise _over_time()


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, str | list | tuple) else None


def _check_size(size: int, what: str) -> None:
    if size > OUTPUT_LIMIT:
        raise _too_big(size, what)


_WIDTH = re.compile(r"\d{" + str(len(str(OUTPUT_LIMIT))) + ",}")


def _check_format(fmt: Any) -> None:
    """A format string whose field width alone passes the limit (``"%9999999999s"``)."""
    if isinstance(fmt, str):
        for digits in _WIDTH.findall(fmt):
            _check_size(int(digits), "a format width")


def _concat(parts: list[Any]) -> str:
    """``a ~ b``: the parts as text, refused before joining past the limit."""
    texts = [str(p) for p in parts]
    _check_size(sum(map(len, texts)), "a ~ concatenation")
    return "".join(texts)


@jinja2.pass_context  # a context filter is never folded into a constant at compile time
def _tick_filter(context: Any, value: Any) -> str:
    _tick()
    return ""


def _checked_replace(text: Any, old: Any, new: Any, count: Any = None) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        hits = text.count(old) if old else len(text) + 1
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        _check_size(len(text) + hits * (len(new) - len(old)), "a replace")


def _bounded_filter(name: str, func: Any) -> Any:
    """A filter that refuses arguments that would make its result too large."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = [a for a in args if not isinstance(a, jinja2.runtime.Context | jinja2.Environment
                                                     | jinja2.nodes.EvalContext)]
        if name == "replace" and len(values) >= 3:
            _checked_replace(*values[:4])
        elif name == "format" and values:
            _check_format(values[0])
        else:
            for value in (*values[1:], *kwargs.values()):
                if isinstance(value, int) and value > OUTPUT_LIMIT:
                    raise _too_big(value, f"the {name} filter's width")
        return func(*args, **kwargs)

    return wrapper


class _Instrument(NodeTransformer):
    """Tick at the top of every loop body; route ``~`` through the bounded concatenation.

    Both are filters, not calls: a filter is a direct function call in the compiled code,
    a call goes through the sandbox's checks (measured: twice the render time)."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        tick = nodes.ExprStmt(nodes.Filter(nodes.Const(None), _TICK, [], [], None, None))
        node.body.insert(0, tick.set_lineno(node.lineno))
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Filter(nodes.List(list(node.nodes)), _CONCAT, [], [], None, None,
                            lineno=node.lineno)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """jinja2's immutable sandbox with work and size bounds (see the module docstring)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        return _Instrument().visit(tree)  # type: ignore[no-any-return]

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _tick()
        owner = getattr(__obj, "__self__", None)
        if owner.__class__ is str:
            method = getattr(__obj, "__name__", "")
            if method == "replace":
                _checked_replace(owner, *args[:3])
            elif method in ("format", "format_map"):
                _check_format(owner)
            elif any(isinstance(a, int) and a > OUTPUT_LIMIT for a in args):
                raise _too_big(max(a for a in args if isinstance(a, int)), f"str.{method}")
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                size = _size(seq)
                if size is not None and isinstance(times, int):
                    _check_size(size * times, "a * repetition")
        elif operator == "%":
            _check_format(left)
        elif operator == "+":
            a, b = _size(left), _size(right)
            if a is not None and b is not None:
                _check_size(a + b, "a + concatenation")
        elif (operator == "**" and isinstance(left, int) and isinstance(right, int)
              and abs(left) > 1 and right > 4096):
            raise _too_big(right, f"{left} ** {right}")
        return super().call_binop(context, operator, left, right)


def _transformers_reference() -> jinja2.Environment | None:
    """The environment transformers renders chat templates in (its filters, globals and
    extensions are copied, so both render the same text); None if this version hides it."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        return _compile_jinja_template("").environment  # type: ignore[no-any-return]
    except Exception:  # an older or newer transformers: fall back to the same settings
        return None


@functools.lru_cache(maxsize=1)
def environment() -> BoundedEnvironment:
    ref = _transformers_reference()
    extensions = ([type(e) for e in ref.extensions.values()] if ref is not None
                  else [loopcontrols])
    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=extensions)
    if ref is not None:
        env.filters.update(ref.filters)
        env.globals.update(ref.globals)
    else:  # transformers' additions, as of 5.x
        import json

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, \
            sort_keys=False: json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                                        separators=separators, sort_keys=sort_keys)
        env.globals["raise_exception"] = raise_exception
    for name in ("replace", "center", "indent", "format"):  # the ones that can grow text
        if name in env.filters:
            env.filters[name] = _bounded_filter(name, env.filters[name])
    env.filters[_TICK] = _tick_filter
    env.filters[_CONCAT] = _concat
    return env


@functools.lru_cache(maxsize=32)
def compile_template(source: str) -> jinja2.Template:
    """The bounded, compiled form of a chat template (cached by its text)."""
    try:
        return environment().from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(
            f"The chat template does not parse (line {exc.lineno}: {exc.message}); fix it "
            "or set tokenizer.chat_template to the model's original one.") from None


def render_bounded(source: str, variables: Mapping[str, Any]) -> str:
    """``source`` rendered with ``variables`` within ``TIME_LIMIT_S`` and ``OUTPUT_LIMIT``."""
    template = compile_template(source)
    outer = getattr(_state, "budget", None)
    budget = _state.budget = _Budget()
    chunks: list[str] = []
    try:
        for chunk in template.generate(**variables):
            budget.output += len(chunk)
            if budget.output > OUTPUT_LIMIT:
                raise _too_big(budget.output, "its output so far")
            chunks.append(chunk)
            budget.ticks += 1
            if budget.ticks % TICK_EVERY == 0 and time.monotonic() > budget.deadline:
                raise _over_time()
    except RecursionError:
        raise ChatTemplateError(
            "The chat template recursed too deeply while rendering (a macro that calls "
            "itself without end); fix the template or set tokenizer.chat_template to the "
            "model's original one.") from None
    except OverflowError as exc:  # the sandbox's range() limit
        raise ChatTemplateError(
            f"The chat template asked for too much while rendering ({exc}); fix the template "
            "or set tokenizer.chat_template to the model's original one.") from None
    finally:
        _state.budget = outer
    return "".join(chunks)


# ----- the same inputs transformers' apply_chat_template hands its template -----------------

try:  # transformers 5.x helpers: the exact preprocessing, so both renders agree
    from transformers.utils.chat_template_utils import (
        _alias_reasoning_fields,
        _normalize_chat_messages,
        _plain_template_data,
    )
except ImportError:  # pragma: no cover - another transformers: the documented behaviour
    def _normalize_chat_messages(conversation: Any) -> list[dict[str, Any]]:
        return [{k: v for k, v in dict(m).items() if v is not None} for m in conversation]

    def _plain_template_data(value: Any) -> Any:
        return value

    def _alias_reasoning_fields(chat: Any) -> Any:
        return chat


def render_chat(
    tokenizer: Any,
    messages: Iterable[Mapping[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    **kwargs: Any,
) -> str:
    """What ``tokenizer.apply_chat_template(messages, tools=..., tokenize=False, ...)`` returns,
    rendered in the bounded sandbox."""
    source = tokenizer.get_chat_template(None, tools)
    chat = _alias_reasoning_fields(_plain_template_data(_normalize_chat_messages(
        list(messages))))
    documents = kwargs.pop("documents", None)
    if documents is not None and not all(isinstance(d, dict) for d in documents):
        raise ChatTemplateError(
            "Documents for the chat template must be dicts with 'title' and 'text' keys; "
            "pass Document objects.")
    variables = _plain_template_data({**tokenizer.special_tokens_map, **kwargs})
    return render_bounded(source, {
        "messages": chat, "tools": _plain_template_data(tools),
        "documents": _plain_template_data(documents),
        "add_generation_prompt": add_generation_prompt, **variables})


def message_texts(message_dicts: Iterable[Mapping[str, Any]]) -> list[str]:
    """The non-empty text of each message (text parts of a list content included)."""
    texts = []
    for m in message_dicts:
        content = m.get("content")
        parts = content if isinstance(content, list) else [content]
        for part in parts:
            text = part.get("text") if isinstance(part, Mapping) else part
            if isinstance(text, str) and text.strip():
                texts.append(text.strip())
    return texts


def check_messages_rendered(message_dicts: Iterable[Mapping[str, Any]], text: str) -> None:
    """Refuse a rendering that shows the model none of the messages' texts: a template that
    drops the conversation would make every answer and every check about nothing."""
    texts = message_texts(message_dicts)
    if texts and not any(t in text for t in texts):
        raise ChatTemplateError(
            f"The chat template rendered none of the {len(texts)} message text(s) (it wrote "
            f"{len(text)} characters of its own): the model would not see the conversation. "
            "Fix the template so it writes each message's content, or set "
            "tokenizer.chat_template to the model's original one.")
