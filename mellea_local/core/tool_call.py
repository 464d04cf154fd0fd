"""A tool call the model asked for, bound to the Python callable that serves it."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from mellea_local.errors import ToolError


@dataclass
class ModelToolCall:
    """One call: tool ``name``, the object that runs it (``func``) and the parsed ``args``.

    ``func`` is either an object with a ``run(**kwargs)`` method (a tool wrapper) or a plain
    callable. ``error`` is set by a parser that kept a call it could not honour (unknown tool,
    arguments failing the schema) so the agent loop can report it back instead of the call
    vanishing; such a call refuses to run.
    """

    name: str
    func: Any
    args: dict[str, Any] = field(default_factory=dict)
    tool_call_id: str | None = None
    error: str | None = None
    raw_arguments: str | None = None
    """The arguments exactly as the model wrote them, when parsed from model text: replaying
    them keeps the re-rendered history token-identical, so the KV cache reuses the whole turn."""

    def _target(self) -> Any:
        if self.error is not None:
            raise ToolError(
                f"Tool call {self.name!r} cannot run: {self.error}. Report the error to the "
                "model as the observation so it can correct the call."
            )
        run = getattr(self.func, "run", None)
        if callable(run):
            return run
        if callable(self.func):
            return self.func
        raise ToolError(
            f"Tool call {self.name!r} has no callable (got {type(self.func).__name__}); "
            "bind a function or an object with a run(**kwargs) method."
        )

    def call_func(self) -> Any:
        """Run the tool synchronously; an async tool must go through ``acall_func``."""
        result = self._target()(**self.args)
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            raise ToolError(
                f"Tool {self.name!r} is async; call `await tool_call.acall_func()` instead."
            )
        return result

    async def acall_func(self) -> Any:
        """Run the tool, awaiting it when it is a coroutine function."""
        target = self._target()
        arun = getattr(self.func, "arun", None)
        result = (arun if callable(arun) else target)(**self.args)
        if inspect.isawaitable(result):
            result = await result
        return result

    def as_chat_dict(self) -> dict[str, Any]:
        """The OpenAI-shaped dict that ``Message.tool_calls`` and chat templates use.

        ``arguments`` is the model's own text when known (templates print a string verbatim),
        else a dict copy that Hugging Face chat templates serialise themselves.
        """
        arguments: Any = self.raw_arguments if self.raw_arguments is not None else dict(self.args)
        return {
            "id": self.tool_call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }
