"""The interface every backend implements.

Two entry points: ``generate_from_context`` (one generation for an action, given a context)
and ``score_requirements`` (a batch of requirement checks through an intrinsic adapter). The
requirements layer decides which to call; a backend only says what it can do
(``supports_intrinsic``).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mellea_local.core.component import Span
    from mellea_local.core.context import Context
    from mellea_local.core.thunk import ModelOutputThunk


REQUIREMENT_CHECK = "requirement-check"
"""The intrinsic ``score_requirements`` runs by default (the peer's contract); the one place
the name is written (``mellea_local.intrinsics.REQUIREMENT_CHECK`` re-exports it)."""

AGENT = "agent"
"""The library name of an agent adapter (``<root>/agent/<base>/alora/``): an aLoRA invoked at
the chat template's assistant header that a tool-calling step is decoded with
(``ModelOption.AGENT_ADAPTER``); the one place the name is written."""


class _BackendMeta(abc.ABCMeta):
    """Counts ``_generate_from_context`` (the peer's hook) as implementing generation."""

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kw: Any):
        cls = super().__new__(mcls, name, bases, ns, **kw)
        hook = getattr(cls, "_generate_from_context", None)
        if hook is not None and not getattr(hook, "_default_hook", False):
            cls.__abstractmethods__ = cls.__abstractmethods__ - {"generate_from_context"}
        return cls


class Backend(metaclass=_BackendMeta):
    """A model that turns a context plus an action into an output.

    A subclass implements either ``generate_from_context`` or, as the peer library's backends
    do, the ``_generate_from_context`` hook with the same signature (the public method calls
    it), so a backend written for the peer works here unchanged.
    """

    # Route plain Requirements to the requirement-check adapter when one is available
    # (instead of asking the model for a yes/no answer).
    default_to_constraint_checking_alora: bool = True

    @abc.abstractmethod
    async def generate_from_context(
        self,
        action: Span,
        ctx: Context,
        *,
        format: type[Any] | None = None,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
    ) -> tuple[ModelOutputThunk[Any], Context]:
        """Start generating the answer to ``action`` after ``ctx``.

        Returns the (possibly still streaming) thunk and the new context
        ``ctx.add(action).add(thunk)``. ``format`` is a pydantic model the output must match;
        ``tool_calls`` lets the model call the tools declared in the context and action.
        """
        return await self._generate_from_context(
            action, ctx, format=format, model_options=model_options, tool_calls=tool_calls
        )

    async def _generate_from_context(
        self,
        action: Span,
        ctx: Context,
        *,
        format: type[Any] | None = None,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
    ) -> tuple[ModelOutputThunk[Any], Context]:
        """The peer library's extension point; override this or ``generate_from_context``."""
        raise NotImplementedError(
            f"{type(self).__name__} implements neither generate_from_context nor "
            "_generate_from_context; override one of them."
        )

    _generate_from_context._default_hook = True  # type: ignore[attr-defined]

    def supports_intrinsic(self, name: str) -> bool:
        """Whether ``score_requirements(..., intrinsic_name=name)`` can run here."""
        return False

    async def score_requirements(
        self,
        ctx: Context,
        descriptions: Sequence[str],
        *,
        intrinsic_name: str = REQUIREMENT_CHECK,
        model_options: dict[str, Any] | None = None,
    ) -> list[str]:
        """Judge the last output in ``ctx`` against each description, as one batch.

        Returns, per description and in order, the intrinsic's JSON text
        ``{"requirement_check": {"score": p}}``; ``requirement_check_to_bool`` reads it.
        """
        raise NotImplementedError(
            f"{type(self).__name__} cannot score requirements with {intrinsic_name!r}; use a "
            "backend whose supports_intrinsic() accepts it, or an LLMaJRequirement."
        )

