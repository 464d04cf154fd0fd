"""Compactors shorten a context's history; pin predicates say what must never be dropped.

A pin predicate looks at the entries (oldest first) and returns how many leading entries are
pinned. A compactor returns either the same context or a smaller one of the same type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.core.turn import has_role
from mellea_local.errors import ContextError, InputTypeError

if TYPE_CHECKING:
    from mellea_local.core.component import Span
    from mellea_local.core.context import Context

C = TypeVar("C", bound="Context")

PinPredicate = Callable[[list["Span"]], int]


class Compactor(Protocol[C]):
    """Anything with ``compact(ctx) -> ctx`` (synchronous; hide async work inside)."""

    def compact(self, ctx: C) -> C: ...


class InlineCompactor:
    """Marks a compactor cheap enough to run on every ``ChatContext.add``.

    ``ChatContext(compactor=...)`` accepts only these: a compactor that calls a model (e.g.
    ``LLMSummarizeCompactor``) would run a generation per added entry. Run such a compactor
    per turn instead (``react(..., compactor=...)``) or gate it with ``ThresholdCompactor``.
    """

    def compact(self, ctx: C) -> C:
        raise NotImplementedError(f"{type(self).__name__} must implement compact(ctx).")


def pin_nothing(spans: list[Span]) -> int:
    """Pin nothing: every entry may be dropped."""
    return 0


def pin_system(spans: list[Span]) -> int:
    """Pin the leading run of system messages (the instructions the model runs under)."""
    n = 0
    while n < len(spans) and has_role(spans[n], "system"):
        n += 1
    return n


def pin_system_and_initial_user(spans: list[Span]) -> int:
    """Pin the leading system messages plus the first user message right after them."""
    n = pin_system(spans)
    if n < len(spans) and has_role(spans[n], "user"):
        n += 1
    return n


def pinned_split(ctx: Context, pin_predicate: PinPredicate, who: str) -> tuple[list[Span], int]:
    """The history as a list and how many leading entries the predicate pins (checked)."""
    spans = ctx.as_list()
    if spans is None:
        raise ContextError(
            f"{who} needs a linear history; {type(ctx).__name__} is not linear."
        )
    pinned = pin_predicate(spans)
    if isinstance(pinned, bool) or not isinstance(pinned, int) or not 0 <= pinned <= len(spans):
        raise ContextError(
            f"Pin predicate returned {pinned!r} for {len(spans)} entries; it must return "
            "how many leading entries to pin, an int from 0 to len(spans)."
        )
    return spans, pinned


class WindowCompactor(InlineCompactor):
    """Keep the pinned prefix plus the newest ``size`` entries.

    The result can hold more than ``size`` entries: the pinned ones are extra by design.
    """

    def __init__(self, size: int, pin_predicate: PinPredicate = pin_system) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ContextError(
                f"WindowCompactor size must be an int >= 0, got {size!r}; 0 keeps only the "
                "pinned entries."
            )
        self.size = size
        self.pin_predicate = pin_predicate

    def compact(self, ctx: C) -> C:
        spans, pinned = pinned_split(ctx, self.pin_predicate, "WindowCompactor")
        body = spans[pinned:]
        if len(body) <= self.size:
            return ctx
        kept = spans[:pinned] + (body[-self.size :] if self.size else [])
        return ctx.with_history(kept)

    def __repr__(self) -> str:
        pin = getattr(self.pin_predicate, "__name__", repr(self.pin_predicate))
        return f"WindowCompactor(size={self.size}, pin_predicate={pin})"


def _last_usage_tokens(ctx: Context) -> int | None:
    """Tokens the newest model output with usage figures reported (total, else prompt +
    completion); None when no output in the history reports usage."""
    for span in reversed(ctx.as_list() or []):
        usage = span.usage if isinstance(span, ModelOutputThunk) else None
        if not usage:
            continue
        if usage.get("total_tokens") is not None:
            return int(usage["total_tokens"])
        return int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
    return None


class ThresholdCompactor(InlineCompactor):
    """Run ``inner`` only once the newest output's token usage exceeds ``threshold``.

    The gate makes any compactor cheap per ``add`` (an LLM summary runs only when the
    conversation has grown past the threshold); ``threshold <= 0`` never fires.
    """

    def __init__(self, inner: Compactor[Any], *, threshold: int) -> None:
        if not callable(getattr(inner, "compact", None)):
            raise InputTypeError(
                f"ThresholdCompactor wraps a compactor with compact(ctx), got "
                f"{type(inner).__name__}."
            )
        if isinstance(threshold, bool) or not isinstance(threshold, int):
            raise InputTypeError(f"threshold must be an int (tokens), got {threshold!r}.")
        self.inner = inner
        self.threshold = threshold

    def compact(self, ctx: C) -> C:
        if self.threshold <= 0:
            return ctx
        used = _last_usage_tokens(ctx)
        if used is None or used <= self.threshold:
            return ctx
        return self.inner.compact(ctx)

    def __repr__(self) -> str:
        return f"ThresholdCompactor({self.inner!r}, threshold={self.threshold})"
