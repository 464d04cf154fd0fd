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
from typing import Any

from mellea_local.adapters import Adapter, FastPathSpec, IOConfig
from mellea_local.errors import IntrinsicInputError, IntrinsicVariableError
from mellea_local.intrinsics.score import REQUIREMENT_CHECK


@dataclass(frozen=True)
class IntrinsicSpec:
    """What the registry knows about an intrinsic beyond its io.yaml."""

    last_role: str | None = field(
        default=None,
        metadata={"help": "The role the conversation must end with (the turn it judges); "
                  "None: any non-empty conversation."},
    )


_REGISTRY: dict[str, IntrinsicSpec] = {REQUIREMENT_CHECK: IntrinsicSpec(last_role="assistant")}
_REGISTRY_LOCK = threading.Lock()


def register_intrinsic(name: str, spec: IntrinsicSpec) -> None:
    """Record what an intrinsic needs beyond its io.yaml (replaces an earlier entry)."""
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

    def instruction(self, variables: Mapping[str, Any]) -> str | None:
        """The instruction turn's text for one call, or None when the io.yaml has none."""
        given, needed = set(variables), set(self.variables)
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
