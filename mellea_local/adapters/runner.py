"""The adapter-runner interface: everything an intrinsic needs from a backend, and no more.

Intrinsics (``mellea_local.intrinsics``) never see a concrete backend. They render a prompt
with the runner's tokenizer, decide which tokens the adapter reads, and ask the runner for one
of two computations:

- ``next_token_logprobs``: the next-token distribution after each of several rows that share a
  prefix, with an adapter on (the one-forward fast path of a ``likelihood`` intrinsic). A
  runner may serve the shared prefix from a cache of the base model's K/V when the adapter's
  kind allows it (``adapter.strategy.reuses_base_cache``: an aLoRA), and may pack the rows into
  one forward;
- ``generate_with_adapter``: greedy generation constrained to a JSON schema, with an adapter
  on, returning each token with its top-k alternatives (the general path).

A backend that implements this Protocol (``LocalHFBackend``; a llama.cpp server backend) runs
every granitelib-format intrinsic with no intrinsic-specific code. Checks a runner must make on
its side, whatever its engine:

- an adapter whose kind's ``require_activation`` fails on the tokens it is fed is refused
  (``AloraActivationError``), never run as the base model;
- after a call no adapter is left active and a shared base cache holds base K/V only.

A runner may declare the capability ``mixed_adapters = True`` and then also provide
``can_mix(calls, shared)`` and ``next_token_logprobs_mixed(calls, shared)`` (several adapters
in one forward); the intrinsics layer reads the declaration (``mixes_adapters``), never
probes for the methods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from mellea_local.adapters.loaded import Adapter
    from mellea_local.adapters.transformations import TokenLogprob


def mixes_adapters(runner: Any) -> bool:
    """Whether ``runner`` declares the ``mixed_adapters`` capability (absent: it does not)."""
    return getattr(runner, "mixed_adapters", False) is True


@runtime_checkable
class AdapterRunner(Protocol):
    """A model with loaded adapters that intrinsics can run (structural: no base class)."""

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer, with the Hugging Face methods intrinsics use:
        ``apply_chat_template(messages, add_generation_prompt=, tokenize=False, **kwargs)``,
        ``encode(text, add_special_tokens=False)``, ``decode``, ``batch_decode`` and ``len``.
        Rendering and tokenizing go through it so prompts are token-identical to generation's.
        """
        ...

    def adapter_for(self, intrinsic: str, *, name: str | None = None) -> Adapter:
        """The loaded adapter named ``name``, else the preferred one serving ``intrinsic``
        (lowest ``strategy.preference``); ``AdapterNotFoundError`` when there is none."""
        ...

    async def next_token_logprobs(
        self,
        adapter: Adapter,
        rows: Sequence[Sequence[int]],
        shared: int,
        *,
        reuse: bool = True,
        read: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Log-probabilities of the next token after each row, with ``adapter`` on.

        ``rows`` share their first ``shared`` tokens (the conversation, up to the invocation
        for an aLoRA). Returns a float32 tensor ``[len(rows), vocab]``, each row log-softmaxed.
        A runner that only sees the top-n candidates fills the rest with ``-inf``. ``reuse=False``
        forbids serving the prefix from a cache (the slow path exactness tests compare with).
        ``read``: the token ids the caller will read (a fast path's categories), or None for
        all; a runner that sees only the top-n candidates must make those exact (it may ask
        for more), a runner that computes the whole vocabulary ignores it.
        """
        ...

    async def generate_with_adapter(
        self,
        adapter: Adapter,
        ids: Sequence[int],
        shared: int,
        *,
        json_schema: Mapping[str, Any] | None,
        max_new_tokens: int,
        top_logprobs: int,
        reuse: bool = True,
    ) -> list[TokenLogprob]:
        """Greedy generation after ``ids`` with ``adapter`` on, constrained to ``json_schema``
        (compact separators ``": "`` and ``", "``, no free whitespace) when given.

        Returns the generated tokens up to, not including, end-of-text, each with its
        log-probability and the ``top_logprobs`` best alternatives after constraints. ``shared``
        and ``reuse`` mean what they mean for ``next_token_logprobs``.
        """
        ...
