"""Adapters described, not loaded: io.yaml configs, their output rules, and where files live.

- ``io_config``: ``IOConfig``, one adapter's io.yaml parsed and checked;
- ``sentences``: sentence markers (splitting, marking, decoding offsets);
- ``transformations``: the output rules (``likelihood``, ``nest``, ``explode``, ...) and the
  one-forward-pass eligibility check (``FastPathSpec``);
- ``library``: resolving a folder, an intrinsic name or a hub source into a ``ResolvedAdapter``;
- ``catalog``: the pinned hub locations of public intrinsics;
- ``kinds``: LoRA and aLoRA as two strategy objects (prompting, activation, batching);
- ``loaded``: ``Adapter``, the record of an adapter a runner has loaded;
- ``runner``: ``AdapterRunner``, the interface a backend implements so intrinsics can run.

Loading weights into a model (``peft.PeftModel``) belongs to the backend.
"""

from mellea_local.adapters.catalog import (
    AGENT_IO_YAML,
    CATALOG,
    GRANITELIB_CORE_REPO,
    GRANITELIB_CORE_REVISION,
    GRANITELIB_GUARDIAN_REPO,
    GRANITELIB_GUARDIAN_REVISION,
    GRANITELIB_RAG_REPO,
    GRANITELIB_RAG_REVISION,
    REQUIREMENT_CHECK_IO_YAML,
    IntrinsicCatalogEntry,
    catalog_entry,
    known_intrinsics,
)
from mellea_local.adapters.io_config import IOConfig
from mellea_local.adapters.kinds import (
    STRATEGIES,
    AdapterKindStrategy,
    AloraStrategy,
    LoraStrategy,
    TokenPrompt,
    find_run,
    strategy_for,
)
from mellea_local.adapters.library import (
    AdapterKind,
    AdapterSource,
    HubSource,
    ResolvedAdapter,
    base_model_name,
    default_library_roots,
    fetch_from_hub,
    find_in_library,
    library_subpath,
    read_adapter_folder,
    resolve_adapter,
)
from mellea_local.adapters.loaded import Adapter
from mellea_local.adapters.output_checks import check_output_schema, check_token_logprobs
from mellea_local.adapters.runner import AdapterRunner
from mellea_local.adapters.transformations import (
    RULE_TYPES,
    DecodeSentencesRule,
    DropDuplicatesRule,
    ExplodeRule,
    FastPathSpec,
    LikelihoodRule,
    MergeSpansRule,
    NestRule,
    ProjectRule,
    TokenLogprob,
    TransformationRule,
    apply_transformations,
    fast_path_spec,
    final_channel,
)

__all__ = [
    "AGENT_IO_YAML",
    "CATALOG",
    "GRANITELIB_CORE_REPO",
    "GRANITELIB_CORE_REVISION",
    "GRANITELIB_GUARDIAN_REPO",
    "GRANITELIB_GUARDIAN_REVISION",
    "GRANITELIB_RAG_REPO",
    "GRANITELIB_RAG_REVISION",
    "REQUIREMENT_CHECK_IO_YAML",
    "RULE_TYPES",
    "STRATEGIES",
    "Adapter",
    "AdapterKind",
    "AdapterKindStrategy",
    "AdapterRunner",
    "AdapterSource",
    "AloraStrategy",
    "DecodeSentencesRule",
    "DropDuplicatesRule",
    "ExplodeRule",
    "FastPathSpec",
    "HubSource",
    "IOConfig",
    "IntrinsicCatalogEntry",
    "LikelihoodRule",
    "LoraStrategy",
    "MergeSpansRule",
    "NestRule",
    "ProjectRule",
    "ResolvedAdapter",
    "TokenLogprob",
    "TokenPrompt",
    "TransformationRule",
    "apply_transformations",
    "base_model_name",
    "catalog_entry",
    "check_output_schema",
    "check_token_logprobs",
    "default_library_roots",
    "fast_path_spec",
    "fetch_from_hub",
    "final_channel",
    "find_in_library",
    "find_run",
    "known_intrinsics",
    "library_subpath",
    "read_adapter_folder",
    "resolve_adapter",
    "strategy_for",
]
