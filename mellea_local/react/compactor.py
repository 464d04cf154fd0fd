"""``LLMSummarizeCompactor``: replace older turns with a summary the model writes.

A compactor is synchronous (``compact(ctx) -> ctx``) but summarising needs the backend, which
is async. ``compact`` runs the summary on a private event loop: directly when no loop is
running, otherwise on a worker thread while the caller's loop waits (so it also works when
``react`` calls it from inside its own loop).

The cut between the summarised part and the kept part is placed so the result is still a
valid chat: the summary takes the role the pinned prefix does not end with, and the kept part
starts with the other role, never with a tool result cut off from its call. With the goal
pinned (a user turn) this gives ``goal (user) -> summary (assistant) -> thought (user) ...``.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from mellea_local.core.backend import Backend
from mellea_local.core.blocks import CBlock
from mellea_local.core.compactor import PinPredicate, pinned_split
from mellea_local.core.component import Span
from mellea_local.core.context import Context, SimpleContext
from mellea_local.core.sync import run_sync
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import ContextError, InputTypeError
from mellea_local.messages import Message, ToolMessage
from mellea_local.react.components import pin_react_initiator
from mellea_local.rendering.chat import to_chat_messages

__all__ = ["DEFAULT_SUMMARY_PROMPT", "SUMMARY_PREFIX", "LLMSummarizeCompactor",
           "react_summary_prompt"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
C = TypeVar("C", bound=Context)

SUMMARY_PREFIX = "[CONTEXT SUMMARY]\n"
DEFAULT_SUMMARY_PROMPT = (
    "Summarise the conversation below so that the work can continue from the summary alone. "
    "Keep every fact, number, tool result and decision that may still matter; leave out "
    "repetition and pleasantries.\n\nConversation:\n{conversation}"
)
# Programming errors propagate; anything else the backend raises leaves the context as it was.
_PROPAGATE = (TypeError, AttributeError, AssertionError, LookupError)


REACT_SUMMARY_HEAD = (
    "Summarise the agent's research progress so far, so that it can carry on from the "
    "summary alone. Keep:\n"
    "- every fact, number and tool result found, with the search queries or calls behind them\n"
    "- the decisions taken and the dead ends, so they are not tried again\n"
    "- what is still open\n"
    "Prioritize density: short lines, structured clearly, no pleasantries."
)


def react_summary_prompt(goal: str | None = None, max_tokens_hint: int | None = None) -> str:
    """A summary prompt for agent loops: keeps ``goal`` in view, optionally bounds the size.

    Braces in the goal are escaped, so the result is a ``str.format`` template with only
    ``{conversation}`` to fill (what ``LLMSummarizeCompactor`` expects).
    """
    lines = [REACT_SUMMARY_HEAD]
    if goal:
        safe = goal.replace("{", "{{").replace("}", "}}")
        lines.append(f"GOAL: {safe}\nKeep whatever still serves this goal.")
    if max_tokens_hint is not None and max_tokens_hint > 0:
        words = int(0.75 * max_tokens_hint)
        lines.append(f"- Be at most ~{max_tokens_hint} tokens (roughly {words} words).")
    return "\n\n".join(lines) + "\n\nContext to summarize:\n{conversation}"


def _calls_text(calls: list[tuple[str, Any]]) -> str:
    return ", ".join(f"{name}({dict(args)})" for name, args in calls)


def _line(span: Span) -> str | None:
    """One transcript line; attachments are noted by count, never reproduced."""
    if isinstance(span, ToolMessage):
        return f"tool ({span.name}): {span.content}"
    if isinstance(span, Message):
        notes = [f"[{len(items)} {kind}(s) attached]" for kind, items in
                 (("image", span._images), ("document", span._docs)) if items]
        if span.role == "assistant" and span.tool_calls:
            calls = [(c.get("function", c).get("name"), c.get("function", c).get("arguments")
                      or {}) for c in span.tool_calls]
            return f"assistant called tools: {_calls_text(calls)}"
        return " ".join([f"{span.role}: {span.content}", *notes])
    if isinstance(span, ModelOutputThunk):
        said = f"assistant: {span.value}" if span.value else None
        if span.tool_calls:
            called = "assistant called tools: " + _calls_text(
                [(c.name, c.args) for c in span.tool_calls])
            return f"{said}\n{called}" if said else called
        return said  # neither text nor calls: nothing worth summarising
    if isinstance(span, CBlock):
        return str(span)
    # Other components: their rendered turn when they render to text, else a typed marker.
    [message] = to_chat_messages([span]) or [None]
    if message is not None and message.content.strip():
        return f"{message.role}: {message.content}"
    content = getattr(span, "content", None)
    return f"<{type(span).__name__}: {content}>" if content else f"<{type(span).__name__}>"


def _transcript(spans: list[Span]) -> str:
    return "\n".join(line for line in map(_line, spans) if line)


class LLMSummarizeCompactor:
    """Summarise everything but the pinned prefix and the newest ``keep_n`` entries.

    ``default_backend`` writes the summaries unless ``compact(ctx, backend=...)`` names
    another. ``pin_predicate`` defaults to ``pin_react_initiator`` (the goal and tools stay);
    the kept part can hold a few more than ``keep_n`` entries when the cut must move to a turn
    boundary (a history without one, e.g. user turns only, is cut at exactly ``keep_n``).
    ``prompt_template`` must contain ``{conversation}`` (every occurrence is replaced; other
    braces are left alone). A backend failure logs a warning and returns the context
    unchanged; programming errors (TypeError, AttributeError, AssertionError, LookupError)
    propagate.
    """

    def __init__(
        self,
        default_backend: Backend,
        *,
        keep_n: int = 5,
        pin_predicate: PinPredicate = pin_react_initiator,
        prompt_template: str | None = None,
        model_options: dict[str, Any] | None = None,
    ) -> None:
        _check_backend(default_backend, "default_backend")
        if isinstance(keep_n, bool) or not isinstance(keep_n, int) or keep_n < 0:
            raise ContextError(f"keep_n must be an int >= 0, got {keep_n!r}.")
        template = DEFAULT_SUMMARY_PROMPT if prompt_template is None else prompt_template
        if "{conversation}" not in template:
            raise ContextError(
                "prompt_template must contain '{conversation}', where the older turns go."
            )
        try:
            template.format(conversation="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ContextError(
                f"prompt_template is a str.format template with only '{{conversation}}' to "
                f"fill ({exc!r}); write other literal braces doubled, '{{{{' and '}}}}'."
            ) from exc
        self.default_backend = default_backend
        self.keep_n = keep_n
        self.pin_predicate = pin_predicate
        self.prompt_template = template
        self.model_options = dict(model_options or {})

    def _cut(self, body: list[Span], prev_role: str | None) -> tuple[int, str]:
        """Where the kept part starts (0: nothing to summarise) and the summary's role."""
        summary_role = "assistant" if prev_role == "user" else "user"
        first_kept = "user" if summary_role == "assistant" else "assistant"
        roles = [m.role for m in to_chat_messages(body)]
        cut = len(body) - self.keep_n
        if first_kept not in roles[1:]:
            # No turn boundary to move to (e.g. user turns only): cut at keep_n exactly.
            return max(cut, 0), summary_role
        while 0 < cut < len(body) and roles[cut] != first_kept:
            cut -= 1
        return max(cut, 0), summary_role

    async def _summarise(self, transcript: str, backend: Backend) -> str:
        prompt = self.prompt_template.format(conversation=transcript)
        mot, _ = await backend.generate_from_context(
            Message("user", prompt), SimpleContext(), model_options=self.model_options
        )
        return (await mot.avalue()).strip()

    def compact(self, ctx: C, backend: Backend | None = None) -> C:
        """The context with its older part summarised (``ctx`` itself when nothing is).

        ``backend`` overrides ``default_backend`` for this call.
        """
        if backend is not None:
            _check_backend(backend, "backend")
        writer = backend if backend is not None else self.default_backend
        spans, pinned = pinned_split(ctx, self.pin_predicate, "LLMSummarizeCompactor")
        body = spans[pinned:]
        if len(body) <= self.keep_n:
            return ctx
        prev_role = to_chat_messages(spans[pinned - 1 : pinned])[0].role if pinned else None
        cut, role = self._cut(body, prev_role)
        if cut == 0:
            return ctx
        try:
            summary = run_sync(self._summarise(_transcript(body[:cut]), writer),
                               thread_name="mellea-summarize")
        except _PROPAGATE:
            raise
        except Exception as exc:
            logger.warning("LLMSummarizeCompactor: summarisation backend call failed (%r); "
                           "context kept as is", exc)
            return ctx
        if not summary:
            logger.warning("LLMSummarizeCompactor: the model wrote an empty summary; context "
                           "kept as is")
            return ctx
        note = Message(role, SUMMARY_PREFIX + summary)  # type: ignore[arg-type]
        return ctx.with_history([*spans[:pinned], note, *body[cut:]])

    def __repr__(self) -> str:
        pin = getattr(self.pin_predicate, "__name__", repr(self.pin_predicate))
        return f"LLMSummarizeCompactor(keep_n={self.keep_n}, pin_predicate={pin})"


def _check_backend(backend: object, name: str) -> None:
    # Duck-typed backends are welcome (as in the peer library): anything with
    # generate_from_context; only a missing one is refused here.
    if backend is None:
        raise InputTypeError(
            f"LLMSummarizeCompactor {name} is None; pass the Backend that writes the "
            "summaries."
        )
