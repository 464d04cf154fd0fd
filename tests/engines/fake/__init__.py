"""``FakeBackend``: a third engine built the way a new one is (one folder, one registry line).

Like httpx's ``MockTransport``, the engine answers from a script: ``handler(adapter_name,
ids) -> logits`` (``None`` for the base model) replaces a model. Everything else (adapter
admission, lookups, scoring, the intrinsics on top, the generation lifecycle) is the shared
``ServingBackend``'s, so the conformance suite tests the shared layer through it. It proves
nothing about a real engine: the HF and llama-server parameters of the suite do that.

The engine keeps the duties only an engine can keep: it refuses an aLoRA whose invocation is
absent from the ids it is fed, and no adapter stays active after a call (``active``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch

from mellea_local.adapters import ResolvedAdapter
from mellea_local.adapters.loaded import Adapter
from mellea_local.backends.adapter_registry import LoadedAdapters
from mellea_local.backends.constrained import GrammarLogitsProcessor
from mellea_local.backends.finish import GenerationOutput
from mellea_local.backends.serving import ServingBackend, ServingRequest
from mellea_local.rendering.prompt import check_prompt_fits

Handler = Callable[[str | None, tuple[int, ...]], torch.Tensor]

POSITIONS = 1024


def hashed_logits(n_vocab: int) -> Handler:
    """A deterministic script: logits drawn from a generator seeded by the adapter and the
    last 16 ids, so equal inputs give equal outputs (and reuse equals scratch by design)."""

    def handler(adapter: str | None, ids: tuple[int, ...]) -> torch.Tensor:
        digest = hashlib.sha256(repr((adapter, ids[-16:])).encode()).digest()
        gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
        return torch.randn(n_vocab, generator=gen) * 3

    return handler


class FakeEngine:
    """A ``ServingEngine`` whose model is a script: capabilities, adapters and ``produce``."""

    mixed_adapters = False
    agent_steps = False

    def __init__(self, handler: Handler, tokenizer: Any) -> None:
        self.handler = handler
        self.tokenizer = tokenizer
        self.loaded: dict[str, ResolvedAdapter] = {}
        self.active: str | None = None
        self.calls = 0

    def load_adapter(self, resolved: ResolvedAdapter, name: str) -> None:
        self.loaded[name] = resolved

    def unload_adapter(self, name: str) -> None:
        del self.loaded[name]

    def check_request(self, request: ServingRequest) -> None:
        """Refused up front, as a server with a fixed context refuses: prompt and budget
        past the scripted positions."""
        budget = int(request.gen_kwargs.get("max_new_tokens") or 16)
        check_prompt_fits(len(request.prompt_ids) + budget, (POSITIONS, "the fake engine's "
                          "limit, prompt and budget together"), "fake", generating=False)

    async def produce(self, request: ServingRequest) -> GenerationOutput:
        """Greedy over the script, under the request's grammar; stops on cancel."""
        budget = int(request.gen_kwargs.get("max_new_tokens") or 16)
        processors = [] if request.grammar is None else [GrammarLogitsProcessor(
            self.tokenizer, request.grammar, len(self.tokenizer), len(request.prompt_ids))]
        new, _ = self.greedy(None, request.prompt_ids, budget, processors, request.cancel)
        if request.on_text is not None and new:
            request.on_text(self.tokenizer.decode(new, skip_special_tokens=True))
        eos = bool(new) and new[-1] == self.tokenizer.eos_token_id
        return GenerationOutput(new, len(request.prompt_ids), eos, request.cancel.is_set())

    def logits(self, adapter: Adapter | None, ids: Sequence[int]) -> torch.Tensor:
        """The next-token logits after ``ids``, with ``adapter`` on for this call only."""
        if adapter is not None:
            adapter.strategy.require_activation(adapter, list(ids))  # the engine's own duty
        self.active = adapter.name if adapter is not None else None
        try:
            self.calls += 1
            return self.handler(self.active, tuple(ids)).float()
        finally:
            self.active = None

    def greedy(self, adapter: Adapter | None, ids: Sequence[int], budget: int,
               processors: Sequence[Any] = (), cancel: threading.Event | None = None,
               ) -> tuple[list[int], list[torch.Tensor]]:
        new: list[int] = []
        scores: list[torch.Tensor] = []
        eos = self.tokenizer.eos_token_id
        while len(new) < budget and not (cancel is not None and cancel.is_set()):
            row = [*ids, *new]
            step = self.logits(adapter, row)[None]
            for p in processors:
                step = p(torch.tensor([row], dtype=torch.long), step)
            scores.append(step[0])
            token = int(step[0].argmax())
            new.append(token)
            if token == eos:
                break
        return new, scores


class FakeBackend(ServingBackend):
    """``ServingBackend`` over a ``FakeEngine`` and a real tokenizer: only construction and
    the two adapter calls, handed to the engine."""

    provider: ClassVar[str] = "fake"

    def __init__(self, tokenizer: Any, *, handler: Handler | None = None,
                 model_id: str = "fake", model_options: dict[str, Any] | None = None) -> None:
        self._tokenizer = tokenizer
        self.model_id = model_id
        self.model_options = dict(model_options or {})
        self.engine = FakeEngine(handler or hashed_logits(len(tokenizer)), tokenizer)
        self._registry = LoadedAdapters()
        self._positions = (POSITIONS, "the fake engine's scripted limit")

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    async def next_token_logprobs(
        self, adapter: Adapter, rows: Sequence[Sequence[int]], shared: int, *,
        reuse: bool = True, read: torch.Tensor | None = None,
    ) -> torch.Tensor:
        check_prompt_fits(max(map(len, rows), default=0), self._positions, self.model_id,
                          generating=False)
        out = [torch.log_softmax(self.engine.logits(adapter, row), dim=-1) for row in rows]
        return torch.stack(out) if out else torch.empty(0, len(self._tokenizer))

    async def _adapter_decode(
        self, adapter: Adapter, ids: list[int], shared: int, *, grammar: str | None,
        max_new_tokens: int, reuse: bool,
    ) -> tuple[list[int], list[torch.Tensor]]:
        check_prompt_fits(len(ids), self._positions, self.model_id, generating=True)
        processors = [] if grammar is None else [GrammarLogitsProcessor(
            self._tokenizer, grammar, len(self._tokenizer), len(ids), fast_forward=True)]
        return self.engine.greedy(adapter, ids, max_new_tokens, processors)
