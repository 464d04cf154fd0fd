"""Contexts: the conversation so far, as an immutable linked list.

Each ``add`` returns a new node pointing at the old one, so a context handed to a backend or a
validator can never change under it, and branches (e.g. sampling attempts) share their common
history for free. A context's type decides what a backend renders from it
(``view_for_generation``); its configuration (e.g. a compactor) travels to every new node.
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Self

from mellea_local.core.blocks import CBlock
from mellea_local.core.compactor import Compactor, InlineCompactor, WindowCompactor, pin_system
from mellea_local.core.component import Component, Span
from mellea_local.core.text import component_text, unrenderable
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.core.turn import ChatTurn, has_role
from mellea_local.errors import ContextError, InputTypeError


@dataclass(frozen=True)
class ContextTurn:
    """The newest exchange: what the model answered (``output``) and the entry before it."""

    model_input: Span | None
    output: ModelOutputThunk[Any] | ChatTurn | None


def _check_span(data: object) -> None:
    """Anything but None and bare text may be stored (the peer library stores any object).

    A bare ``str`` is refused because it says nothing of its role; an object no renderer
    knows is kept here and refused when a backend renders it (``as_generic_chat_history``
    formats it with its ``formatter``).
    """
    if data is None or isinstance(data, str):
        raise InputTypeError(
            f"A context entry cannot be {type(data).__name__}; wrap text in CBlock(...) or "
            "Message(role, text)."
        )


def _is_model_answer(data: object) -> bool:
    return isinstance(data, ModelOutputThunk) or has_role(data, "assistant")


class Context(abc.ABC):
    """An immutable node: the root is empty, every other node holds one span."""

    def __init__(self) -> None:
        self._previous: Context | None = None
        self._data: Span | None = None
        self._is_root = True

    # ----- structure -------------------------------------------------------------------

    @property
    def is_root_node(self) -> bool:
        return self._is_root

    @property
    def previous_node(self) -> Self | None:
        return self._previous  # type: ignore[return-value]

    @property
    def node_data(self) -> Span | None:
        return self._data

    def new_instance(self) -> Self:
        """An empty context of the same type and configuration."""
        new = copy.copy(self)
        new._previous, new._data, new._is_root = None, None, True
        return new

    def _link(self, data: Span) -> Self:
        # copy.copy carries the configuration of any subclass without each one listing it.
        new = copy.copy(self)
        new._previous, new._data, new._is_root = self, data, False
        return new

    def add(self, data: Span) -> Self:
        """A new context with ``data`` appended; this one is unchanged."""
        _check_span(data)
        return self._link(data)

    def with_history(self, spans: Iterable[Span]) -> Self:
        """A context of the same type and configuration holding exactly ``spans``.

        Built without running any compactor: compactors use it to return their result.
        """
        new = self.new_instance()
        for span in spans:
            _check_span(span)
            new = new._link(span)
        return new

    def is_linear(self) -> bool:
        """Whether the history is one chain; a branching subclass returns False."""
        return True

    def as_list(self, last_n: int | None = None) -> list[Span] | None:
        """The entries oldest first (only the newest ``last_n`` if given); None if not linear.

        Walks nodes rather than comparing data, so the same object added twice appears twice.
        """
        if last_n is not None and last_n < 0:
            raise ContextError(f"last_n must be >= 0 or None, got {last_n}.")
        if not self.is_linear():
            return None
        items: list[Span] = []
        node: Context = self
        while not node._is_root and (last_n is None or len(items) < last_n):
            items.append(node._data)  # type: ignore[arg-type]
            node = node._previous  # type: ignore[assignment]
        items.reverse()
        return items

    # ----- what backends see -----------------------------------------------------------

    @abc.abstractmethod
    def view_for_generation(self) -> list[Span] | None:
        """The entries a backend renders before the action (None if it cannot render)."""

    def actions_for_available_tools(self) -> list[Span] | None:
        """The entries whose declared tools stay available to the model."""
        return self.view_for_generation()

    def last_output(self, check_last_n_components: int = 3) -> ModelOutputThunk[Any] | None:
        """The newest model output among the last few entries, or None."""
        for item in reversed(self.as_list(check_last_n_components) or []):
            if isinstance(item, ModelOutputThunk):
                return item
        return None

    def last_turn(self) -> ContextTurn | None:
        """The newest turn: a model answer (thunk or assistant Message) and its input.

        If the newest entry is not an answer, the turn is that input with no output yet.
        Tool messages count as input.
        """
        items = self.as_list(2)
        if not items:
            return None
        last = items[-1]
        if not _is_model_answer(last):
            return ContextTurn(model_input=last, output=None)
        before = items[0] if len(items) == 2 and not _is_model_answer(items[0]) else None
        return ContextTurn(model_input=before, output=last)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        entries = self.as_list()
        size = "non-linear" if entries is None else f"{len(entries)} entries"
        return f"{type(self).__name__}({size})"


class SimpleContext(Context):
    """Keeps its history but shows none of it to the model: every call starts fresh."""

    def view_for_generation(self) -> list[Span] | None:
        return []


def _estimated_tokens(span: Span) -> int:
    """The peer library's rough cost of an entry: a token per 4 characters, at least 1."""
    if isinstance(span, (CBlock, ModelOutputThunk)):
        text = str(span)
    elif isinstance(getattr(span, "content", None), str):
        text = span.content  # type: ignore[union-attr]
    elif isinstance(span, Component):
        text = component_text(span)  # what rendering shows of it as one chat turn
    else:
        raise unrenderable(span)
    return max(1, len(text) // 4)


def _context_length(model_id: object) -> int | None:
    length = getattr(model_id, "context_length", None)
    return length if isinstance(length, int) and length > 0 else None


class ChatContext(Context):
    """A conversation whose whole (possibly compacted) history is rendered each call.

    ``compactor`` runs on every ``add`` and its result is the new context, so compaction is
    persistent; it must be an ``InlineCompactor``. ``window_size=N`` is shorthand for
    ``WindowCompactor(N)``. ``token_context_length_limit`` bounds what a backend is shown: the
    newest entries that fit in 75 % of it, at ~4 characters a token, after the leading system
    messages, which always stay. ``model_id`` records the model the context is for; it sets
    that bound only when it carries a ``context_length`` (a plain id string never truncates).
    """

    def __init__(
        self,
        *,
        compactor: Compactor[Any] | None = None,
        window_size: int | None = None,
        token_context_length_limit: int | None = None,
        model_id: Any = None,
    ) -> None:
        super().__init__()
        if compactor is not None and window_size is not None:
            raise ContextError(
                "Pass either compactor= or window_size= to ChatContext, not both; for a window "
                "with a custom pin use compactor=WindowCompactor(size, pin_predicate=...)."
            )
        if window_size is not None:
            compactor = WindowCompactor(window_size)
        if compactor is not None and not isinstance(compactor, InlineCompactor):
            raise InputTypeError(
                f"ChatContext requires an InlineCompactor (it runs on every add), got "
                f"{type(compactor).__name__}; subclass InlineCompactor, gate a model-calling "
                "compactor with ThresholdCompactor, or pass it to react(compactor=...) to run "
                "once per turn."
            )
        limit = token_context_length_limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit <= 0):
            raise ContextError(
                f"token_context_length_limit must be a positive int (tokens), got {limit!r}."
            )
        self._compactor = compactor
        self._token_context_length_limit = limit
        self._model_id = model_id

    @property
    def compactor(self) -> Compactor[Any] | None:
        return self._compactor

    @property
    def model_id(self) -> Any:
        """The model this context is meant for (set by the constructor or a session)."""
        return self._model_id

    def _bind_model(self, model_id: Any) -> Self:
        """A copy of this empty context bound to ``model_id`` (the original is unchanged)."""
        if not self.is_root_node:
            raise ContextError(
                "_bind_model() must be called on a root (empty) context; binding a context "
                "with history would drop it. Build ChatContext(model_id=...) up front."
            )
        bound = copy.copy(self)
        bound._model_id = model_id
        return bound

    @classmethod
    def reset_to_new(cls) -> Self:
        """A bare context of this type, without this one's configuration."""
        return cls()

    def add(self, data: Span) -> Self:
        new = super().add(data)
        if self._compactor is None:
            return new
        compacted = self._compactor.compact(new)
        if not isinstance(compacted, ChatContext):
            raise InputTypeError(
                f"{type(self._compactor).__name__}.compact returned "
                f"{type(compacted).__name__}; a ChatContext compactor must return a "
                "ChatContext (build it with ctx.with_history(spans))."
            )
        return compacted  # type: ignore[return-value]

    def view_for_generation(self) -> list[Span] | None:
        spans = self.as_list()
        limit = self._token_context_length_limit or _context_length(self._model_id)
        if spans is None or limit is None:
            return spans
        budget = int(limit * 0.75)
        pinned = pin_system(spans)
        kept: list[Span] = []
        spent = 0
        for span in reversed(spans[pinned:]):
            spent += _estimated_tokens(span)
            if spent > budget:
                break
            kept.append(span)
        return spans[:pinned] + kept[::-1]
