"""Where the public intrinsic adapters live on the Hugging Face hub, pinned to exact commits.

The 13 intrinsics of IBM's granitelib-core, -rag and -guardian libraries, under the names and
at the commits the peer (mellea 0.8) uses, so both load byte-identical adapters.

A catalog entry names a hub repository laid out as ``<intrinsic>/<base-model>/<lora|alora>/``
and the commit to read it at. The revision is always a full 40-hex commit SHA, never a branch:
``main`` moves, and an adapter that changes under a deployed program changes its verdicts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from mellea_local.core.backend import REQUIREMENT_CHECK
from mellea_local.errors import AdapterError, AdapterNotFoundError

ADAPTER_KINDS = ("alora", "lora")
"""The adapter kinds a library may hold for one intrinsic, in our default preference order."""

GRANITELIB_CORE_REPO = "ibm-granite/granitelib-core-r1.0"
"""IBM's core intrinsics library (requirement-check, uncertainty, context-attribution)."""

GRANITELIB_CORE_REVISION = "d0a2a96a4cd07e96f0fe7ca29a42bfe088299d43"
"""The commit of ``GRANITELIB_CORE_REPO`` we read. It is the peer's pin (mellea
``backends/adapters/catalog.py``: ``_CORE_R1_SHA``, "main @ 2026-05-26"), so both libraries
load byte-identical adapters. Move it only together with a check of the new io.yaml files."""

GRANITELIB_RAG_REPO = "ibm-granite/granitelib-rag-r1.0"
"""IBM's RAG intrinsics library (answerability, citations, hallucination detection, ...)."""

GRANITELIB_RAG_REVISION = "2f0b2c79c6731068625aca8045c2eb2e8912b353"
"""The peer's pin of ``GRANITELIB_RAG_REPO`` (``_RAG_SHA``, "main @ 2026-05-26")."""

GRANITELIB_GUARDIAN_REPO = "ibm-granite/granitelib-guardian-r1.0"
"""IBM's guardian intrinsics library (policy guardrails, guardian-core, factuality)."""

GRANITELIB_GUARDIAN_REVISION = "773b254e98f993a605ec4b6259634906e0e64e8e"
"""The peer's pin of ``GRANITELIB_GUARDIAN_REPO`` (``_GUARDIAN_SHA``, "main @ 2026-05-26")."""

REQUIREMENT_CHECK_IO_YAML = Path(__file__).with_name("requirement_check_io.yaml")
"""The requirement-check io.yaml in the public format, to copy into an adapter folder you
build or train (``<library>/requirement-check/<base>/<alora|lora>/io.yaml``)."""

AGENT_IO_YAML = Path(__file__).with_name("agent_io.yaml")
"""The io.yaml of an agent adapter (no instruction, schema or rules: the tool-call parser reads
its steps), to copy beside a trained agent aLoRA (``<library>/agent/<base>/alora/io.yaml``)."""

_COMMIT_SHA = re.compile(r"[0-9a-f]{40}")
_INTRINSIC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def require_intrinsic_name(name: str) -> str:
    """Refuse names that are not one plain folder name (they become hub path patterns)."""
    if not isinstance(name, str) or not _INTRINSIC_NAME.fullmatch(name):
        raise AdapterError(
            f"Intrinsic name {name!r} must be a single folder name (letters, digits, '-', '_', "
            "'.'), such as 'requirement-check'."
        )
    return name


def require_commit_sha(revision: str, *, what: str) -> str:
    """Refuse a hub revision that is not a full commit SHA (branches and tags move)."""
    if not isinstance(revision, str) or not _COMMIT_SHA.fullmatch(revision):
        raise AdapterError(
            f"{what} pins revision {revision!r}; it must be a full 40-character lowercase "
            "commit SHA, never a branch or tag, so the adapter cannot change under you."
        )
    return revision


@dataclass(frozen=True)
class IntrinsicCatalogEntry:
    """One intrinsic known to be published on the hub."""

    name: str = field(metadata={"help": "Intrinsic name, also its top-level folder in the repo."})
    repo_id: str = field(metadata={"help": "Hub repository holding the adapters."})
    revision: str = field(metadata={"help": "Full 40-hex commit SHA the files are read at."})
    adapter_kinds: tuple[str, ...] = field(
        default=ADAPTER_KINDS,
        metadata={"help": "Kinds the repo publishes for this intrinsic (per base model, some)."},
    )
    description: str = field(default="", metadata={"help": "What the intrinsic computes."})

    def __post_init__(self) -> None:
        require_intrinsic_name(self.name)
        require_commit_sha(self.revision, what=f"Catalog entry {self.name!r}")
        unknown = [k for k in self.adapter_kinds if k not in ADAPTER_KINDS]
        if unknown or not self.adapter_kinds:
            raise AdapterError(
                f"Catalog entry {self.name!r} lists adapter kinds {list(self.adapter_kinds)}; "
                f"use a non-empty subset of {list(ADAPTER_KINDS)}."
            )


def _entries() -> tuple[IntrinsicCatalogEntry, ...]:
    core = (GRANITELIB_CORE_REPO, GRANITELIB_CORE_REVISION)
    rag = (GRANITELIB_RAG_REPO, GRANITELIB_RAG_REVISION)
    guardian = (GRANITELIB_GUARDIAN_REPO, GRANITELIB_GUARDIAN_REVISION)
    table = (
        (REQUIREMENT_CHECK, core, "Scores whether the last assistant turn meets a requirement: "
         '{"requirement_check": {"score": p}}, met when p > 0.5.'),
        ("uncertainty", core, 'Certainty of the last assistant turn: {"certainty": p}.'),
        ("context-attribution", core, "Which document sentences and earlier messages each "
         "sentence of the last assistant turn drew on: records with character spans."),
        ("answerability", rag, "Whether the documents answer the last user question: "
         '{"answerability": "answerable" | "unanswerable"}.'),
        ("citations", rag, "Document sentences each sentence of the last assistant turn cites: "
         "records with character spans."),
        ("context_relevance", rag, "Deprecated upstream (Granite 4.0 only): whether a document "
         'is relevant to the last user question: {"context_relevance": label}.'),
        ("hallucination_detection", rag, "Per sentence of the last assistant turn, whether the "
         "documents support it, with an explanation: records with character spans."),
        ("query_clarification", rag, "A clarifying question for an ambiguous last user "
         'question, or "CLEAR": {"clarification": text}.'),
        ("query_rewrite", rag, "The last user question rewritten to stand alone: "
         '{"rewritten_question": text}.'),
        ("policy-guardrails", guardian, "Whether the conversation complies with a policy: "
         '{"label": "Yes" | "No" | "Ambiguous"}.'),
        ("guardian-core", guardian, "Risk of a turn under a criterion: "
         '{"guardian": {"score": p}}.'),
        ("factuality-detection", guardian, "Whether the last assistant turn is factually "
         'incorrect given the documents: {"score": "yes" | "no"}.'),
        ("factuality-correction", guardian, "The last assistant turn corrected against the "
         'documents: {"correction": text}.'),
    )
    return tuple(IntrinsicCatalogEntry(name=name, repo_id=repo, revision=revision,
                                       description=description)
                 for name, (repo, revision), description in table)


CATALOG: Mapping[str, IntrinsicCatalogEntry] = MappingProxyType(
    {entry.name: entry for entry in _entries()}
)
"""Intrinsics that can be fetched from the hub when no local library holds them."""


def known_intrinsics() -> tuple[str, ...]:
    """Names of the intrinsics in the catalog."""
    return tuple(CATALOG)


def catalog_entry(name: str) -> IntrinsicCatalogEntry:
    """The catalog entry for ``name``; unknown names raise ``AdapterNotFoundError``."""
    try:
        return CATALOG[name]
    except KeyError:
        raise AdapterNotFoundError(
            f"No catalog entry for intrinsic {name!r}; known intrinsics: {list(CATALOG)}. "
            "Pass a local adapter folder or a HubSource for other adapters."
        ) from None
