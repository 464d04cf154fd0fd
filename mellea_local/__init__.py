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
    GenerateLog,
    GenerationMetadata,
    ImageBlock,
    ImageUrlBlock,
    InlineCompactor,
    ModelOutputThunk,
    ModelToolCall,
    PinPredicate,
    RawProviderResponse,
    SimpleContext,
    Span,
    TemplateRepresentation,
    ThresholdCompactor,
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
    BackendArgumentError,
    BenchConfigError,
    BenchmarkError,
    CheckFileError,
    ComponentParseError,
    ConstrainedDecodingError,
    ContextError,
    DatasetError,
    EmbeddedModelError,
    IndexRangeError,
    InputTypeError,
    IntrinsicError,
    IntrinsicInputError,
    IntrinsicOptionError,
    IntrinsicOutputError,
    IntrinsicVariableError,
    InvalidInputError,
    InvalidStateError,
    IOConfigError,
    KVCacheError,
    LineError,
    MelleaLocalError,
    MissingExtraError,
    ModelLoadError,
    ModelOptionError,
    ModelOptionTypeError,
    NotAnAdapterRunnerError,
    PromptTooLongError,
    ReactArgumentError,
    ReactLoopError,
    ReactNoValidCallError,
    RequirementDefinitionError,
    ScoreJSONError,
    SyncInEventLoopError,
    ThunkStateError,
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
from mellea_local.model_ids import ModelIdentifier, get_context_length
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
    PartialValidationResult,
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
from mellea_local.session import MelleaSession, start_session
from mellea_local.tools import AbstractMelleaTool, MelleaTool, tool

# Names whose modules import torch/transformers: resolved on first use (PEP 562), so
# `import mellea_local` stays light for code that only builds contexts and requirements.
_LAZY = {
    "LocalHFBackend": "mellea_local.backends.hf",
    "LlamaServerBackend": "mellea_local.backends.llama_server.backend",
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


# Lazy names whose module needs an optional extra. On a base install they resolve to a
# stand-in class that raises MissingExtraError (naming the extra) when used, so the star
# import, `dir()` and `__all__` keep working without the extra.
_EXTRA = {"LlamaServerBackend": "llamacpp"}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mellea_local' has no attribute {name!r}")
    import importlib

    try:
        value = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        from mellea_local.extras import EXTRA_MODULES, stand_in

        extra = _EXTRA.get(name)
        missing = (exc.name or "").split(".")[0]
        if extra is None or missing not in EXTRA_MODULES[extra]:
            raise
        value = stand_in(name, extra, module)
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
    "BackendArgumentError",
    "BaseSamplingStrategy",
    "BenchConfigError",
    "BenchmarkError",
    "CBlock",
    "CacheStats",
    "ChatContext",
    "CheckFileError",
    "Compactor",
    "Component",
    "ComponentParseError",
    "ComputedModelOutputThunk",
    "ConstrainedDecodingError",
    "Context",
    "ContextError",
    "ContextTurn",
    "DatasetError",
    "Document",
    "EmbeddedModelError",
    "GenerateLog",
    "GenerationMetadata",
    "IOConfigError",
    "ImageBlock",
    "ImageUrlBlock",
    "IndexRangeError",
    "InlineCompactor",
    "InputTypeError",
    "Instruction",
    "Intrinsic",
    "IntrinsicError",
    "IntrinsicInputError",
    "IntrinsicOptionError",
    "IntrinsicOutputError",
    "IntrinsicSpec",
    "IntrinsicVariableError",
    "InvalidInputError",
    "InvalidStateError",
    "KVCacheError",
    "LLMSummarizeCompactor",
    "LLMaJRequirement",
    "LineError",
    "LlamaServerBackend",
    "LocalHFBackend",
    "MelleaLocalError",
    "MelleaSession",
    "MelleaTool",
    "Message",
    "MissingExtraError",
    "ModelIdentifier",
    "ModelLoadError",
    "ModelOption",
    "ModelOptionError",
    "ModelOptionTypeError",
    "ModelOutputThunk",
    "ModelToolCall",
    "MultiTurnStrategy",
    "NotAnAdapterRunnerError",
    "PartialValidationResult",
    "PinPredicate",
    "PrefixCache",
    "PromptTooLongError",
    "RawProviderResponse",
    "ReactArgumentError",
    "ReactInitiator",
    "ReactLoopError",
    "ReactNoValidCallError",
    "ReactThought",
    "RejectionSamplingStrategy",
    "RepairTemplateStrategy",
    "Requirement",
    "RequirementDefinitionError",
    "SamplingAttempt",
    "SamplingResult",
    "ScoreJSONError",
    "SimpleContext",
    "Span",
    "SyncInEventLoopError",
    "TemplateRepresentation",
    "ThresholdCompactor",
    "ThunkStateError",
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
    "get_context_length",
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
    "start_session",
    "tool",
    "validate",
]


def __dir__() -> list[str]:
    # The lazy names too, so `dir(mellea_local)` lists the whole public API before first use.
    return sorted(set(globals()) | set(__all__))
