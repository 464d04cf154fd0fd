"""LoRA and aLoRA as two small strategy objects behind one interface.

What differs between the two kinds is small and local, so each difference is one hook here and
every caller (prompt building, the runner's forward passes, choosing an adapter) calls the hook
instead of branching on the kind - the way PEFT gives each LoRA variant an object
(``ALoraLinearVariant``) rather than an ``if`` in the core path:

- ``build_prompt``: where in a rendered prompt the adapter starts acting, in token space;
- ``activation_start`` / ``require_activation``: where it starts in the tokens actually fed
  (an aLoRA whose invocation is missing would silently run as the base model under PEFT);
- ``base_cache_prefix``: how much of the prefix may come from the base model's K/V cache;
- ``engine_invocation``: what an engine that places the adapter itself must be told;
- ``run_on``: which of its two request forms an engine that switches adapters on per request
  and keeps K/V per conversation (llama.cpp's server slots) uses for a call;
- ``batchable``: whether several suffixes can share one forward;
- ``peft_forward_kwargs``: what PEFT needs to place the adapter in a packed batch;
- ``preference``: which kind serves an intrinsic when both are loaded.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from mellea_local.adapters.library import AdapterKind
from mellea_local.errors import AloraActivationError

if TYPE_CHECKING:
    from mellea_local.adapters.loaded import Adapter

T = TypeVar("T")
R = TypeVar("R", covariant=True)

Encode = Callable[[str], list[int]]
"""Text -> token ids with no special tokens added (``encode(t, add_special_tokens=False)``)."""


@dataclass(frozen=True)
class TokenPrompt:
    """Token ids fed to an adapter, and where the part it shares with the base model ends.

    ``shared`` counts the leading tokens whose K/V the adapter computes exactly as the base
    model does (up to the invocation for an aLoRA; the conversation for a LoRA, which within
    one batch is still computed once for all rows, but never taken from the base cache).
    """

    ids: list[int]
    shared: int


def find_run(ids: Sequence[int], run: Sequence[int]) -> int:
    """Index of the last occurrence of ``run`` in ``ids``, or -1 (PEFT uses the last one)."""
    n = len(run)
    if n == 0:
        return -1
    target = list(run)
    first = target[0]
    for start in range(len(ids) - n, -1, -1):
        # The first token alone first: a slice per position cost ~20 us a warm check.
        if ids[start] == first and list(ids[start:start + n]) == target:
            return start
    return -1


class PerRequestEngine(Protocol[R]):
    """An engine that switches adapters on per request and keeps one K/V sequence per
    conversation (llama.cpp's server slots). The strategy picks which form a call takes
    (:meth:`AdapterKindStrategy.run_on`), as a PEFT variant runs its own forward."""

    def every_token(self, adapter: Adapter) -> R:
        """The adapter acts on every token, so its K/V is never the conversation's base K/V:
        run it apart from the conversation's sequence."""
        ...

    def from_invocation(self, adapter: Adapter, invocation: list[int]) -> R:
        """The adapter switches on at ``invocation``: every token before it keeps its base
        K/V, so it runs on the conversation's own sequence."""
        ...


class AdapterKindStrategy(ABC):
    """How one adapter kind is prompted, fed and batched. Stateless: one instance per kind."""

    kind: ClassVar[AdapterKind]
    reuses_base_cache: ClassVar[bool]
    """True when every token before the adapter's start keeps its base-model K/V (read it
    through :meth:`base_cache_prefix`: callers ask the strategy, they do not branch on it)."""
    preference: ClassVar[int]
    """Lower serves an intrinsic first when adapters of both kinds are loaded for it."""
    invoked: ClassVar[bool]
    """True when the adapter switches on at an invocation sequence (read it through
    :meth:`engine_invocation`)."""

    def base_cache_prefix(self, shared: int, *, reuse: bool = True) -> int:
        """How many of the ``shared`` leading tokens may be served from the base model's K/V
        cache: all of them when this kind keeps base K/V there and the caller allows reuse,
        else none (the adapter computes them itself)."""
        return shared if reuse and self.reuses_base_cache else 0

    def engine_invocation(self, tokens: Sequence[int] | None) -> list[int] | None:
        """The invocation tokens an engine that places the adapter itself must be told (e.g.
        llama.cpp's ``adapter.alora.invocation_tokens``), or None for a kind that acts on
        every token."""
        return list(tokens or ()) if self.invoked else None

    @abstractmethod
    def run_on(self, adapter: Adapter, engine: PerRequestEngine[T]) -> T:
        """The engine's request form for ``adapter``'s kind (``PerRequestEngine``)."""

    @abstractmethod
    def build_prompt(
        self, adapter: Adapter, encode: Encode, text: str, turn_start: int
    ) -> TokenPrompt:
        """Token ids of the rendered prompt ``text``; ``turn_start`` is where, in ``text``,
        the intrinsic's own turn begins (everything before it is the conversation)."""

    @abstractmethod
    def activation_start(self, adapter: Adapter, fed: Sequence[int]) -> int:
        """Index in ``fed`` from which the adapter acts, or -1 when it would not act at all."""

    def require_activation(self, adapter: Adapter, fed: Sequence[int]) -> int:
        """Refuse a forward in which the adapter would not act on the tokens fed; else the
        index in ``fed`` it acts from (``activation_start``, so a caller need not search the
        tokens twice: ``peft_forward_kwargs(len(fed) - start)`` places it as PEFT would)."""
        start = self.activation_start(adapter, fed)
        if start < 0:
            raise AloraActivationError(
                f"aLoRA {adapter.name!r} would not activate: its invocation tokens "
                f"{list(adapter.invocation_tokens or ())} do not occur in the {len(fed)} tokens "
                "fed to it. Build the prompt so the invocation lies after the reused cache (in "
                "token space), or use a plain LoRA."
            )
        return start

    @abstractmethod
    def batchable(self, adapter: Adapter, suffixes: Sequence[Sequence[int]]) -> bool:
        """Whether the suffixes can run in one packed forward after a common prefix."""

    @abstractmethod
    def peft_forward_kwargs(self, suffix_tokens: int) -> dict[str, Any]:
        """Extra PEFT forward arguments for a forward whose last ``suffix_tokens`` tokens the
        adapter must act on, exactly those (a packed batch: its suffixes together; one row:
        from ``require_activation``'s start on)."""


class LoraStrategy(AdapterKindStrategy):
    """A plain LoRA adapts every token: nothing is shared with the base cache."""

    kind: ClassVar[AdapterKind] = AdapterKind.LORA
    reuses_base_cache: ClassVar[bool] = False
    preference: ClassVar[int] = 1
    invoked: ClassVar[bool] = False

    def build_prompt(
        self, adapter: Adapter, encode: Encode, text: str, turn_start: int
    ) -> TokenPrompt:
        head = encode(text[:turn_start])
        return TokenPrompt(head + encode(text[turn_start:]), len(head))

    def activation_start(self, adapter: Adapter, fed: Sequence[int]) -> int:
        return 0

    def run_on(self, adapter: Adapter, engine: PerRequestEngine[T]) -> T:
        return engine.every_token(adapter)

    def batchable(self, adapter: Adapter, suffixes: Sequence[Sequence[int]]) -> bool:
        return True

    def peft_forward_kwargs(self, suffix_tokens: int) -> dict[str, Any]:
        return {}


class AloraStrategy(AdapterKindStrategy):
    """An aLoRA acts from the last occurrence of its invocation tokens on (as PEFT places it).

    Every token before the invocation is computed exactly as by the base model, so the base
    cache of the conversation serves it as-is.
    """

    kind: ClassVar[AdapterKind] = AdapterKind.ALORA
    reuses_base_cache: ClassVar[bool] = True
    preference: ClassVar[int] = 0
    invoked: ClassVar[bool] = True

    def build_prompt(
        self, adapter: Adapter, encode: Encode, text: str, turn_start: int
    ) -> TokenPrompt:
        """Locate the invocation, keeping it intact in token space.

        Where the rendered text spells the invocation (its last occurrence, at or after the
        intrinsic's turn), the invocation ids are spliced in at that point: BPE may otherwise
        merge its last token with the next character (``<requirements>:``) and the ids would
        never spell it. Otherwise the invocation is looked for in the ids of the whole text,
        which finds invocations built from chat-template tokens (a role header).
        """
        invocation = list(adapter.invocation_tokens or ())
        spelled = adapter.invocation_text or ""
        at = text.rfind(spelled) if spelled else -1
        if at >= turn_start:
            head = encode(text[:at])
            return TokenPrompt(head + invocation + encode(text[at + len(spelled):]), len(head))
        ids = encode(text)
        start = find_run(ids, invocation)
        if start < 0 or start < len(encode(text[:turn_start])):
            raise AloraActivationError(
                f"aLoRA {adapter.name!r} is invoked by {spelled!r} (ids {invocation}), which "
                "the rendered intrinsic turn does not contain, neither as text nor as tokens; "
                f"its io.yaml instruction ({adapter.io_config.source}) or the chat template's "
                "role header must produce the invocation."
            )
        return TokenPrompt(ids, start)

    def activation_start(self, adapter: Adapter, fed: Sequence[int]) -> int:
        return find_run(fed, adapter.invocation_tokens or ())

    def run_on(self, adapter: Adapter, engine: PerRequestEngine[T]) -> T:
        return engine.from_invocation(adapter, list(adapter.invocation_tokens or ()))

    def batchable(self, adapter: Adapter, suffixes: Sequence[Sequence[int]]) -> bool:
        # One offset serves the packed batch: each suffix must start with the invocation and
        # not repeat it (PEFT would start the adapter at a repeat).
        invocation = adapter.invocation_tokens or ()
        return all(find_run(s, invocation) == 0 for s in suffixes)

    def peft_forward_kwargs(self, suffix_tokens: int) -> dict[str, Any]:
        return {"alora_offsets": [suffix_tokens]}


STRATEGIES: Mapping[AdapterKind, AdapterKindStrategy] = MappingProxyType(
    {strategy.kind: strategy for strategy in (LoraStrategy(), AloraStrategy())}
)
"""The strategy of each adapter kind."""


def strategy_for(kind: AdapterKind) -> AdapterKindStrategy:
    """The strategy object of an adapter kind."""
    return STRATEGIES[kind]
