"""mellea_local: local-model inference with Activated LoRA adapters.

The public API is re-exported here; submodules are implementation detail. Importing the
package stays light (no torch or transformers): backends load those when they are built.
"""

from importlib.metadata import PackageNotFoundError, version

from mellea_local.core import (
    AudioBlock,
    AudioUrlBlock,
    Backend,
    CBlock,
    ChatContext,
    Compactor,
    Component,
    ComputedModelOutputThunk,
    Context,
    ContextTurn,
    ImageBlock,
    ImageUrlBlock,
    ModelOutputThunk,
    ModelToolCall,
    PinPredicate,
    SimpleContext,
    Span,
    TemplateRepresentation,
    WindowCompactor,
    pin_nothing,
    pin_system,
    pin_system_and_initial_user,
)
from mellea_local.errors import (
    AdapterError,
    AdapterNotFoundError,
    AdapterSchemaMismatchError,
    AloraActivationError,
    ComponentParseError,
    EmbeddedModelError,
    IntrinsicError,
    IntrinsicInputError,
    IntrinsicOptionError,
    IntrinsicOutputError,
    IntrinsicVariableError,
    IOConfigError,
    KVCacheError,
    MelleaLocalError,
    ModelLoadError,
    NotAnAdapterRunnerError,
    SyncInEventLoopError,
    ToolArgumentsError,
    ToolError,
    UnsupportedInputError,
)
from mellea_local.messages import (
    Document,
    Message,
    ToolMessage,
    as_chat_history,
    as_generic_chat_history,
    message_from_template_representation,
)
from mellea_local.options import ModelOption
from mellea_local.react import (
    MELLEA_FINALIZER_TOOL,
    LLMSummarizeCompactor,
    ReactInitiator,
    ReactThought,
    pin_react_initiator,
    react,
)
from mellea_local.requirements import (
    ALoraRequirement,
    LLMaJRequirement,
    Requirement,
    ValidationResult,
    avalidate,
    check,
    default_output_to_bool,
    req,
    reqify,
    requirement_check_score,
    requirement_check_to_bool,
    simple_validate,
    validate,
)
from mellea_local.sampling import (
    BaseSamplingStrategy,
    Instruction,
    MultiTurnStrategy,
    RejectionSamplingStrategy,
    RepairTemplateStrategy,
    SamplingAttempt,
    SamplingResult,
    ainstruct,
    instruct,
)
from mellea_local.tools import AbstractMelleaTool, MelleaTool, tool

# Names whose modules import torch/transformers: resolved on first use (PEP 562), so
# `import mellea_local` stays light for code that only builds contexts and requirements.
_LAZY = {
    "LocalHFBackend": "mellea_local.backends.huggingface",
    "CacheStats": "mellea_local.backends.stats",
    "PrefixCache": "mellea_local.backends.kv_cache",
    "Adapter": "mellea_local.adapters.loaded",
    "AdapterRunner": "mellea_local.adapters.runner",
    "Intrinsic": "mellea_local.intrinsics.intrinsic",
    "IntrinsicSpec": "mellea_local.intrinsics.intrinsic",
    "register_intrinsic": "mellea_local.intrinsics.intrinsic",
    "intrinsic": "mellea_local.intrinsics.call",
    "aintrinsic": "mellea_local.intrinsics.call",
    "requirement_check": "mellea_local.intrinsics.requirement_check",
    "requirement_checks": "mellea_local.intrinsics.requirement_check",
    "arequirement_check": "mellea_local.intrinsics.requirement_check",
    "arequirement_checks": "mellea_local.intrinsics.requirement_check",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mellea_local' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


try:
    __version__ = version("mellea-local")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = [
    "MELLEA_FINALIZER_TOOL",
    "ALoraRequirement",
    "AbstractMelleaTool",
    "Adapter",
    "AdapterError",
    "AdapterNotFoundError",
    "AdapterRunner",
    "AdapterSchemaMismatchError",
    "AloraActivationError",
    "AudioBlock",
    "AudioUrlBlock",
    "Backend",
    "BaseSamplingStrategy",
    "CBlock",
    "CacheStats",
    "ChatContext",
    "Compactor",
    "Component",
    "ComponentParseError",
    "ComputedModelOutputThunk",
    "Context",
    "ContextTurn",
    "Document",
    "EmbeddedModelError",
    "IOConfigError",
    "ImageBlock",
    "ImageUrlBlock",
    "Instruction",
    "Intrinsic",
    "IntrinsicError",
    "IntrinsicInputError",
    "IntrinsicOptionError",
    "IntrinsicOutputError",
    "IntrinsicSpec",
    "IntrinsicVariableError",
    "KVCacheError",
    "LLMSummarizeCompactor",
    "LLMaJRequirement",
    "LocalHFBackend",
    "MelleaLocalError",
    "MelleaTool",
    "Message",
    "ModelLoadError",
    "ModelOption",
    "ModelOutputThunk",
    "ModelToolCall",
    "MultiTurnStrategy",
    "NotAnAdapterRunnerError",
    "PinPredicate",
    "PrefixCache",
    "ReactInitiator",
    "ReactThought",
    "RejectionSamplingStrategy",
    "RepairTemplateStrategy",
    "Requirement",
    "SamplingAttempt",
    "SamplingResult",
    "SimpleContext",
    "Span",
    "SyncInEventLoopError",
    "TemplateRepresentation",
    "ToolArgumentsError",
    "ToolError",
    "ToolMessage",
    "UnsupportedInputError",
    "ValidationResult",
    "WindowCompactor",
    "__version__",
    "ainstruct",
    "aintrinsic",
    "arequirement_check",
    "arequirement_checks",
    "as_chat_history",
    "as_generic_chat_history",
    "avalidate",
    "check",
    "default_output_to_bool",
    "instruct",
    "intrinsic",
    "message_from_template_representation",
    "pin_nothing",
    "pin_react_initiator",
    "pin_system",
    "pin_system_and_initial_user",
    "react",
    "register_intrinsic",
    "req",
    "reqify",
    "requirement_check",
    "requirement_check_score",
    "requirement_check_to_bool",
    "requirement_checks",
    "simple_validate",
    "tool",
    "validate",
]
