"""The Component protocol and the small representation a component hands to a renderer.

A component knows its parts, how it wants to be shown to a model (a ``TemplateRepresentation``)
and how to read a model's answer back (``_parse``). Renderers and backends only ever look at
the representation, so new component kinds need no backend changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, runtime_checkable

from mellea_local.errors import ComponentParseError

if TYPE_CHECKING:
    from mellea_local.core.blocks import (
        AudioBlock,
        AudioUrlBlock,
        CBlock,
        ImageBlock,
        ImageUrlBlock,
    )
    from mellea_local.core.thunk import ModelOutputThunk

S = TypeVar("S", covariant=True)


@runtime_checkable
class Component(Protocol[S]):
    """Anything that can be put in a context and rendered for a model.

    Subclass it explicitly to inherit the defaults below; ``isinstance`` checks are structural
    (a class with ``parts``, ``format_for_llm`` and ``_parse`` counts).
    """

    def parts(self) -> list[Span]:
        """The blocks and components this one is built from."""
        raise NotImplementedError(f"{type(self).__name__} must implement parts().")

    def format_for_llm(self) -> TemplateRepresentation | str:
        """How this component wants to be shown to a model."""
        raise NotImplementedError(f"{type(self).__name__} must implement format_for_llm().")

    def _parse(self, computed: ModelOutputThunk) -> S:
        """Turn the model's answer to this component into its parsed representation."""
        raise NotImplementedError(f"{type(self).__name__} must implement _parse().")


def parse(component: Component[S], computed: ModelOutputThunk) -> S:
    """``component._parse`` with any failure wrapped, so callers catch one error type."""
    try:
        return component._parse(computed)
    except Exception as exc:
        raise ComponentParseError(
            f"{type(component).__name__}._parse failed on the model output ({exc!r}); "
            "check the output format the component expects, or constrain generation "
            "with format=."
        ) from exc


@dataclass
class TemplateRepresentation:
    """A component's self-description for a renderer.

    ``role=None`` means "guess from position" (assistant for model outputs, user otherwise).
    ``template`` is an inline Jinja2 template rendered with ``args``; ``template_order`` names
    template files to look up instead, most specific first. ``thinking``, ``tool_calls``
    (OpenAI-shaped dicts) and ``tool_call_id`` travel onto the chat message built from it.
    """

    obj: Any
    args: dict[str, Any] = field(default_factory=dict)
    tools: dict[str, Any] | None = None
    fields: list[Any] | None = None
    template: str | None = None
    template_order: list[str] | None = None
    images: list[ImageBlock | ImageUrlBlock] | None = None
    audio: list[AudioBlock | AudioUrlBlock] | None = None
    role: str | None = None
    thinking: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


# What a context holds. A string alias, because thunk.py imports this module.
Span: TypeAlias = "Component[Any] | CBlock | ModelOutputThunk[Any]"
