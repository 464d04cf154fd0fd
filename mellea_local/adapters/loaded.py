"""``Adapter``: what an adapter runner knows about one adapter it has loaded.

A plain record, free of any model or backend: intrinsics read it (its io.yaml, its kind's
strategy, its invocation) and hand it back to the runner that loaded it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

    @classmethod
    def build(
        cls, *, name: str, kind: AdapterKind, path: Path, io_config: IOConfig,
        invocation_tokens: tuple[int, ...] | None, intrinsic: str | None, tokenizer: Any = None,
    ) -> Adapter:
        """The one builder of a record, for a loaded adapter and one not trained yet alike:
        its fast-path spec precomputed from the io.yaml and, given the tokenizer, its
        invocation spelled out (what an aLoRA's prompt building looks for in the text)."""
        return cls(
            name=name, kind=kind, path=path, io_config=io_config,
            invocation_tokens=invocation_tokens, intrinsic=intrinsic,
            fast_path=io_config.fast_path_spec(),
            invocation_text=(tokenizer.decode(list(invocation_tokens), skip_special_tokens=False)
                             if invocation_tokens and tokenizer is not None else None),
        )

    @property
    def strategy(self) -> AdapterKindStrategy:
        """The kind's strategy object (prompting, activation, batching)."""
        return strategy_for(self.kind)

    @property
    def is_alora(self) -> bool:
        """For labels and reports; code paths call ``strategy`` hooks instead of branching."""
        return self.kind == AdapterKind.ALORA
