"""Script ReACT turns for ``tests/doubles.ScriptedBackend`` (loop logic only, no model).

A scripted tool call is unbound (``func=None``), like a parsed call whose tool the double
cannot see: the loop must find the tool by name itself.
"""

from __future__ import annotations

import itertools
from typing import Any

from doubles import Reply, ScriptedBackend

from mellea_local.core.tool_call import ModelToolCall

_ids = itertools.count(1)


def call(name: str, *, error: str | None = None, func: Any = None, **args: Any) -> ModelToolCall:
    """One tool call with a fresh call id."""
    return ModelToolCall(name, func, args, tool_call_id=f"call_{next(_ids)}", error=error)


def turn(*calls: ModelToolCall, text: str = "", thinking: str | None = None) -> Reply:
    """One model turn: optional text and thinking, then ``calls`` in order (a list, as the
    real backend gives them)."""
    return Reply(text, thinking=thinking, tool_calls=list(calls) or None)


def final(answer: Any, **kw: Any) -> Reply:
    """A turn that calls ``final_answer`` alone."""
    return turn(call("final_answer", answer=answer), **kw)


def scripted(*replies: Reply | str) -> ScriptedBackend:
    return ScriptedBackend.scripted(replies)
