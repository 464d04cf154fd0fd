"""``Adapter``: what an adapter runner knows about one adapter it has loaded.

A plain record, free of any model or backend: intrinsics read it (its io.yaml, its kind's
strategy, its invocation) and hand it back to the runner that loaded it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mellea_local.adapters.io_config import IOConfig
from mellea_local.adapters.kinds import AdapterKindStrategy, strategy_for
from mellea_local.adapters.library import AdapterKind
from mellea_local.adapters.transformations import FastPathSpec


@dataclass(frozen=True)
class Adapter:
    """A loaded adapter: what it is, where it came from, and how its output is read."""

    name: str = field(metadata={"help": "The name the runner knows it by (unique per runner)."})
    kind: AdapterKind = field(metadata={"help": "LoRA or aLoRA; selects ``strategy``."})
    path: Path = field(metadata={"help": "The adapter folder it was loaded from."})
    io_config: IOConfig = field(metadata={"help": "Its parsed io.yaml."})
    invocation_tokens: tuple[int, ...] | None = field(
        metadata={"help": "Token ids that switch an aLoRA on; None for a LoRA."}
    )
    intrinsic: str | None = field(
        metadata={"help": "The intrinsic it serves (library layout or add_adapter(intrinsic=))."}
    )
    fast_path: FastPathSpec | None = field(
        default=None, repr=False,
        metadata={"help": "How to score it in one forward pass; None: generate instead."},
    )
    invocation_text: str | None = field(
        default=None,
        metadata={"help": "The invocation tokens decoded with special tokens kept."},
    )

    @property
    def strategy(self) -> AdapterKindStrategy:
        """The kind's strategy object (prompting, activation, batching)."""
        return strategy_for(self.kind)

    @property
    def is_alora(self) -> bool:
        """For labels and reports; code paths call ``strategy`` hooks instead of branching."""
        return self.kind == AdapterKind.ALORA
