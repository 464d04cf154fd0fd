"""Core types: blocks, components, thunks, contexts, compactors and the Backend interface."""

from mellea_local.core.backend import Backend
from mellea_local.core.blocks import (
    AudioBlock,
    AudioUrlBlock,
    CBlock,
    ImageBlock,
    ImageUrlBlock,
    make_image_block,
)
from mellea_local.core.compactor import (
    Compactor,
    InlineCompactor,
    PinPredicate,
    ThresholdCompactor,
    WindowCompactor,
    pin_nothing,
    pin_system,
    pin_system_and_initial_user,
)
from mellea_local.core.component import Component, TemplateRepresentation, parse
from mellea_local.core.context import ChatContext, Context, ContextTurn, SimpleContext
from mellea_local.core.generation import GenerateLog, GenerationMetadata, RawProviderResponse
from mellea_local.core.spans import (
    blockify,
    generate_walk,
    get_audio_from_component,
    get_images_from_component,
)
from mellea_local.core.thunk import ComputedModelOutputThunk, ModelOutputThunk
from mellea_local.core.tool_call import ModelToolCall

# What a context holds, as a real union now that all three types exist (component.py keeps
# a string alias for annotations, because thunk.py imports it). SampleActionType is the
# peer library's older name for it.
Span = Component | CBlock | ModelOutputThunk
SampleActionType = Span

# The peer's ``mellea.core`` also holds these; here they live in later stages, which core
# never imports (tests/test_import_graph.py). A peer script's ``from mellea.core import
# Requirement`` still ports by renaming: the name resolves on first use (PEP 562) to the very
# object ``mellea_local`` exports. Only this table resolves that way (tests/compat).
PEER_ALIASES = {
    "Requirement": "mellea_local.requirements",
    "ValidationResult": "mellea_local.requirements",
    "PartialValidationResult": "mellea_local.requirements",
    "default_output_to_bool": "mellea_local.requirements",
    "SamplingResult": "mellea_local.sampling",
}


def __getattr__(name: str) -> object:
    module = PEER_ALIASES.get(name)
    if module is None:
        raise AttributeError(f"module 'mellea_local.core' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "AudioBlock",
    "AudioUrlBlock",
    "Backend",
    "CBlock",
    "ChatContext",
    "Compactor",
    "Component",
    "ComputedModelOutputThunk",
    "Context",
    "ContextTurn",
    "GenerateLog",
    "GenerationMetadata",
    "ImageBlock",
    "ImageUrlBlock",
    "InlineCompactor",
    "ModelOutputThunk",
    "ModelToolCall",
    "PinPredicate",
    "RawProviderResponse",
    "SampleActionType",
    "SimpleContext",
    "Span",
    "TemplateRepresentation",
    "ThresholdCompactor",
    "WindowCompactor",
    "blockify",
    "generate_walk",
    "get_audio_from_component",
    "get_images_from_component",
    "make_image_block",
    "parse",
    "pin_nothing",
    "pin_system",
    "pin_system_and_initial_user",
]
