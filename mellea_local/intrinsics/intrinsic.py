"""``Intrinsic``: one adapter-backed judgement, as an object; and the registry of known ones.

An intrinsic is what an io.yaml describes (granitelib format): the instruction turn appended to
the conversation (a ``str.format`` template whose ``{names}`` are the call's variables), the
JSON its adapter emits (``response_format``) and the rules turning that JSON into the result
(``likelihood``, ``nest``, ...). ``Intrinsic`` binds that config to a name and says how to build
the prompt and read the result; nothing in it is specific to one intrinsic.

The registry holds only what an io.yaml cannot say. Today that is one thing: which turn the
conversation must end with (requirement-check judges the last *assistant* turn). An intrinsic
that is not registered runs with the defaults, so adding one takes an io.yaml and an adapter
folder in the library layout (``<root>/<intrinsic>/<base-model>/<alora|lora>/``), no code.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, get_args

from mellea_local.adapters import Adapter, FastPathSpec, IOConfig
from mellea_local.adapters.catalog import require_intrinsic_name
from mellea_local.errors import InputTypeError, IntrinsicInputError, IntrinsicVariableError
from mellea_local.intrinsics.score import REQUIREMENT_CHECK
from mellea_local.messages import Role

ROLES: tuple[str, ...] = tuple(get_args(Role))
"""The chat roles a conversation may end with."""


@dataclass(frozen=True)
class IntrinsicSpec:
    """What the registry knows about an intrinsic beyond its io.yaml."""

    last_role: str | None = field(
        default=None,
        metadata={"help": "The role the conversation must end with (the turn it judges); "
                  "None: any non-empty conversation."},
    )

    def __post_init__(self) -> None:
        if self.last_role is not None and self.last_role not in ROLES:
            raise InputTypeError(
                f"IntrinsicSpec(last_role={self.last_role!r}): the role must be one of "
                f"{list(ROLES)} or None (any turn)."
            )


LAST_MESSAGE = "last_message"
"""The instruction variable filled from the conversation (the public format's convention)."""

_JUDGES_ANSWER = IntrinsicSpec(last_role="assistant")
_JUDGES_QUESTION = IntrinsicSpec(last_role="user")
_REGISTRY: dict[str, IntrinsicSpec] = {
    REQUIREMENT_CHECK: _JUDGES_ANSWER,
    # The catalog's intrinsics that read one particular turn (the others read any conversation).
    **dict.fromkeys(("uncertainty", "context-attribution", "citations",
                     "hallucination_detection", "factuality-detection",
                     "factuality-correction"), _JUDGES_ANSWER),
    **dict.fromkeys(("answerability", "context_relevance", "query_clarification",
                     "query_rewrite"), _JUDGES_QUESTION),
}
_REGISTRY_LOCK = threading.Lock()


def register_intrinsic(name: str, spec: IntrinsicSpec) -> None:
    """Record what an intrinsic needs beyond its io.yaml (replaces an earlier entry)."""
    if not isinstance(name, str):
        raise InputTypeError(
            f"register_intrinsic needs the intrinsic's name as a str (e.g. 'citations'), got "
            f"{type(name).__name__} ({name!r})."
        )
    require_intrinsic_name(name)
    if not isinstance(spec, IntrinsicSpec):
        raise InputTypeError(
            f"register_intrinsic({name!r}, ...) needs an IntrinsicSpec, got "
            f"{type(spec).__name__} ({spec!r}); pass IntrinsicSpec(last_role=...)."
        )
    with _REGISTRY_LOCK:
        _REGISTRY[name] = spec


def registered_intrinsics() -> Mapping[str, IntrinsicSpec]:
    """A read-only view of the registry."""
    with _REGISTRY_LOCK:
        return MappingProxyType(dict(_REGISTRY))


@dataclass(frozen=True)
class Intrinsic:
    """An intrinsic bound to the io.yaml of the adapter that serves it."""

    name: str
    config: IOConfig
    spec: IntrinsicSpec = IntrinsicSpec()

    @classmethod
    def for_adapter(cls, adapter: Adapter) -> Intrinsic:
        """The intrinsic ``adapter`` serves, configured by its io.yaml."""
        name = adapter.intrinsic or adapter.name
        return cls(name, adapter.io_config, registered_intrinsics().get(name, IntrinsicSpec()))

    @property
    def variables(self) -> frozenset[str]:
        """The variables the instruction names (``{requirement}``, ``{question}``, ...)."""
        return self.config.instruction_fields

    @property
    def fast_path(self) -> FastPathSpec | None:
        """How to score it in one forward pass; None when only generation can."""
        return self.config.fast_path_spec()

    def instruction(
        self, variables: Mapping[str, Any], *, last_message: str | None = None
    ) -> str | None:
        """The instruction turn's text for one call, or None when the io.yaml has none.

        ``{last_message}`` is filled from the conversation (its last turn as the model reads
        it), never by the caller: a call that passes it is refused.
        """
        if LAST_MESSAGE in variables:
            raise IntrinsicVariableError(
                f"Intrinsic {self.name!r}: '{LAST_MESSAGE}' is filled from the conversation's "
                "last turn; drop it from the call and put the text in the context instead."
            )
        given, needed = set(variables), set(self.variables) - {LAST_MESSAGE}
        if given != needed:
            missing, extra = sorted(needed - given), sorted(given - needed)
            parts = []
            if missing:
                parts.append("pass " + ", ".join(f"{n}=..." for n in missing))
            if extra:
                parts.append(f"drop {extra}")
            raise IntrinsicVariableError(
                f"Intrinsic {self.name!r} ({self.config.source}) names the variables "
                f"{sorted(needed)} in its instruction, but the call passed {sorted(given)}: "
                + " and ".join(parts) + "."
            )
        wrong = {n: v for n, v in variables.items() if not isinstance(v, str)}
        if wrong:
            name, value = next(iter(sorted(wrong.items())))
            raise IntrinsicVariableError(
                f"Intrinsic {self.name!r}: variable {name}={value!r} is a "
                f"{type(value).__name__}; instruction variables are text, so pass a str "
                f"(str({name}) if its printed form is what the adapter should read)."
            )
        if self.config.instruction is None:
            return None
        if LAST_MESSAGE in self.variables:
            variables = {**variables, LAST_MESSAGE: last_message or ""}
        return self.config.render_instruction(**variables)

    def check_conversation(self, roles: Sequence[str], context_type: str) -> None:
        """Refuse a conversation this intrinsic cannot judge, saying what to pass instead."""
        if not roles:
            raise IntrinsicInputError(
                f"Intrinsic {self.name!r} judges a conversation, but the context's view is empty "
                f"({context_type}); pass a ChatContext holding the conversation."
            )
        wanted = self.spec.last_role
        if wanted is not None and roles[-1] != wanted:
            raise IntrinsicInputError(
                f"Intrinsic {self.name!r} judges the last {wanted} turn, but the context ends "
                f"with a {roles[-1]!r} turn; add the {wanted} turn to the context first."
            )
