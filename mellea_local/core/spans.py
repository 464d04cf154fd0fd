"""Small helpers over spans (what a context holds): normalise, walk, read attachments."""

from __future__ import annotations

from typing import Any

from mellea_local.core.blocks import AudioBlock, AudioUrlBlock, CBlock, ImageBlock, ImageUrlBlock
from mellea_local.core.component import Component, Span
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import InputTypeError, InvalidInputError

__all__ = ["blockify", "generate_walk", "get_audio_from_component", "get_images_from_component"]


def blockify(s: str | Span) -> Span:
    """A string becomes a ``CBlock``; a block, component or model output is returned as is."""
    if isinstance(s, str):
        return CBlock(s)
    if isinstance(s, (CBlock, ModelOutputThunk, Component)):
        return s
    raise InputTypeError(
        f"blockify takes a str, CBlock, Component or ModelOutputThunk, got {type(s).__name__}."
    )


def generate_walk(c: Span) -> list[ModelOutputThunk[Any]]:
    """The uncomputed model outputs reachable from ``c`` through ``parts()``, depth first."""
    if isinstance(c, ModelOutputThunk):
        return [] if c.is_computed() else [c]
    if isinstance(c, CBlock):
        return []
    if isinstance(c, Component):
        return [mot for part in c.parts() for mot in generate_walk(part)]
    raise InvalidInputError(
        f"parts() should only contain CBlocks, Components or ModelOutputThunks; found "
        f"{type(c).__name__}."
    )


def get_images_from_component(c: Component[Any]) -> list[ImageBlock | ImageUrlBlock] | None:
    """The component's ``images`` when it has a non-empty list of them, else None."""
    images = getattr(c, "images", None)
    return list(images) if images else None


def get_audio_from_component(c: Component[Any]) -> list[AudioBlock | AudioUrlBlock] | None:
    """The component's ``audio`` when it has a non-empty list of it, else None."""
    audio = getattr(c, "audio", None)
    return list(audio) if audio else None
