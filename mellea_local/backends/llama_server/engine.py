"""``LlamaServerEngine``: the llama-server fleet as a ``ServingEngine``.

It owns everything that makes tokens on the servers: the fleet and its routing, the request
checks (``AdapterRequests``), plain generation as one streamed request (``streaming``),
constrained generation one token per request (``decoder``), the one-token reads of the
adapter calls (``probabilities``) and each call's cache counts (``call_counts``).
``LlamaServerBackend`` only builds it (arguments, server checks) and hands it to the shared
``ServingBackend``, whose generation lifecycle awaits :meth:`LlamaServerEngine.produce`.

The adapters a llama-server runs are fixed when it starts (the export folder's manifest gives
each its ``lora`` id), so "loading" an admitted adapter here means finding the server-side id
of its folder and checking that its invocation has a GGUF spelling; the admission rules
themselves (``check_supported``, tokenizer fit, names) are ``ServingBackend.admit_adapter``'s,
the same as ``LocalHFBackend``'s.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch

import mellea_local.backends.llama_server.probabilities as probs
from mellea_local.adapters import ResolvedAdapter
from mellea_local.adapters.loaded import Adapter
from mellea_local.backends.finish import GenerationOutput
from mellea_local.backends.llama_server.adapter_requests import AdapterRequests
from mellea_local.backends.llama_server.adapter_requests import reusable_prefix as reusable
from mellea_local.backends.llama_server.call_counts import CallCounts
from mellea_local.backends.llama_server.client import Completion
from mellea_local.backends.llama_server.decoder import step_generate
from mellea_local.backends.llama_server.gguf_export import exported_invocation
from mellea_local.backends.llama_server.manifest import ServedAdapter
from mellea_local.backends.llama_server.routing import Fleet, Server, Slot, root_key
from mellea_local.backends.llama_server.streaming import stream_generate
from mellea_local.backends.stats import CacheStats
from mellea_local.errors import AdapterError

if TYPE_CHECKING:
    from mellea_local.backends.serving import ServingRequest

__all__ = ["LlamaServerEngine"]

T = TypeVar("T")


class LlamaServerEngine:
    """The servers (``fleet``), which ``lora`` id serves each admitted adapter, and the
    generation and one-token reads made on them.

    Built before the servers are checked (admission needs ``load_adapter``), then given the
    fleet by :meth:`connect`; a call before that is a programming error.
    """

    mixed_adapters = False
    agent_steps = False  # tool-calling steps run on the base model here
    """A llama-server request states one adapter set: no mixed-adapter forward."""

    def __init__(self, served: Sequence[ServedAdapter], *, tokenizer: Any, n_probs: int,
                 max_new_tokens: int) -> None:
        self._by_folder = {Path(s.folder).resolve(): s.lora_id for s in served}
        self.lora_ids: dict[str, int] = {}
        """Server-side ``lora`` id by adapter name, for every admitted adapter."""
        self.tokenizer = tokenizer
        self.n_vocab = len(tokenizer)
        self.n_probs = n_probs
        """Top tokens read first for a one-token read (more when they do not decide it)."""
        self.max_new_tokens = max_new_tokens
        """The generation budget when a call sets none."""
        self._eot = tokenizer.eos_token_id
        self.stats = CacheStats()
        """Tokens prefilled and reused, per call and in total (``backend.stats``)."""
        self.counts = CallCounts(self.stats)
        self._fleet: Fleet | None = None
        self._requests: AdapterRequests | None = None
        self._unsampleable: list[list[Any]] | None = None

    def connect(self, fleet: Fleet, *, n_ctx: int | None, keyed: bool) -> None:
        """Serve on ``fleet``, whose slots hold ``n_ctx`` positions each (None: unknown);
        ``keyed``: the servers require an API key (``adapter_requests``)."""
        self._fleet = fleet
        self._requests = AdapterRequests(self.lora_ids, keyed=keyed, n_ctx=n_ctx)

    @property
    def fleet(self) -> Fleet:
        """The servers and their slots (``routing.Fleet``)."""
        assert self._fleet is not None, "LlamaServerEngine.connect was not called"
        return self._fleet

    @property
    def requests(self) -> AdapterRequests:
        """Each request's ``lora`` list and what its slot then holds (``adapter_requests``)."""
        assert self._requests is not None, "LlamaServerEngine.connect was not called"
        return self._requests

    # ----- adapters (admitted by ServingBackend.admit_adapter first) ----------------------

    def load_adapter(self, resolved: ResolvedAdapter, name: str) -> None:
        lora_id = self._by_folder.get(resolved.path)
        if lora_id is None:
            raise AdapterError(
                f"{resolved.path} is not served by these llama-servers: a server loads its "
                "adapters at start. Put it in an adapter library for the base, export again "
                "(`mellea-local export-gguf MODEL OUT_DIR`) and launch or connect to that."
            )
        exported_invocation(resolved.kind, resolved.invocation_tokens)  # refuses one token
        self.lora_ids[name] = lora_id

    def unload_adapter(self, name: str) -> None:
        """Stop using ``name`` (the server keeps its weights, at scale 0, until it stops)."""
        self.lora_ids.pop(name, None)

    # ----- generation (ServingEngine; the lifecycle is ServingBackend's) ---------------------

    def budget(self, gen_kwargs: Mapping[str, Any]) -> int:
        """The tokens a generation may make: its ``max_new_tokens``, else the default."""
        return int(gen_kwargs.get("max_new_tokens") or self.max_new_tokens)

    def check_request(self, request: ServingRequest) -> None:
        """Refuse a prompt and budget the slot's context cannot hold (``PromptTooLongError``),
        before any request is sent."""
        self.requests.check_fits(request.prompt_ids, self.budget(request.gen_kwargs))

    async def produce(self, request: ServingRequest) -> GenerationOutput:
        """Constrained generation one token per request (``decoder``) under a grammar, else
        one streamed base request (``streaming``); the call's counts go to
        ``request.meta["cache_counts"]``."""
        ids, cancel = request.prompt_ids, request.cancel
        if request.grammar is not None:
            new_ids = await self.step_generate(None, ids, 0, grammar=request.grammar,
                                               gen_kwargs=request.gen_kwargs, cancel=cancel,
                                               reserve=request.closing_reserve)
            eos = bool(new_ids) and new_ids[-1] == self._eot
            out = GenerationOutput(new_ids, len(ids), eos, cancel.is_set())
        else:
            out, finals = await stream_generate(
                self.on_fleet, self.requests, self.tokenizer, ids, request.gen_kwargs,
                self.budget(request.gen_kwargs), request.on_text, request.stop_strings, cancel)
            if finals:
                self.counts.record(finals, len(ids) - 1)
        request.meta["cache_counts"] = self.counts.last
        return out

    async def on_fleet(self, ids: Sequence[int], run: Callable[[Server, Slot], Awaitable[T]],
                       *, lane: bytes = b"") -> T:
        """``run`` on the conversation's (server, slot), failing over (``routing``)."""
        return await self.fleet.run(root_key(ids, self._eot) + lane, run)

    async def step_generate(
        self, adapter: Adapter | None, ids: list[int], shared: int, *, grammar: str | None,
        gen_kwargs: Mapping[str, Any], cancel: threading.Event | None = None,
        reuse: bool = True, fast_forward: bool = False,
        scores_out: list[torch.Tensor] | None = None, reserve: tuple[int, int] | None = None,
    ) -> list[int]:
        """Constrained generation, one request per token (``decoder``), on the conversation's
        slot (or the adapter's lane); all its requests counted as one call."""
        completions: list[Completion] = []

        async def ask(prompt: list[int], n_probs: int) -> torch.Tensor:
            return await self._ask(adapter, prompt, n_probs, reuse, completions)

        new_ids = await step_generate(
            ask, tokenizer=self.tokenizer, n_vocab=self.n_vocab, n_probs=self.n_probs,
            ids=ids, grammar=grammar, gen_kwargs=gen_kwargs, budget=self.budget(gen_kwargs),
            cancel=cancel, fast_forward=fast_forward, scores_out=scores_out, reserve=reserve)
        if completions:
            self.counts.record(completions, reusable(adapter, len(ids), shared))
        return new_ids

    async def _ask(self, adapter: Adapter | None, ids: list[int], n_probs: int, reuse: bool,
                   completions: list[Completion]) -> torch.Tensor:
        """One ``n_predict: 1`` request on the conversation's slot (the adapter's lane); the
        next-token logprobs as a dense tensor. The reply joins ``completions``."""
        if self._unsampleable is None:  # once, on the first one-token read
            self._unsampleable = probs.unsampleable(self.tokenizer, self.n_vocab)
        body = {"n_predict": 1, "n_probs": n_probs, "post_sampling_probs": False,
                "temperature": 0.0, "logit_bias": self._unsampleable}
        self.counts.full_reads += n_probs >= self.n_vocab
        requests = self.requests

        async def run(server: Server, slot: Slot) -> Completion:
            if adapter is None:
                return await requests.base(server, slot, ids, body)
            return await requests.adapter(server, slot, adapter, ids, body, reuse=reuse)

        completions.append(await self.on_fleet(ids, run, lane=requests.lane(adapter)))
        return probs.reply_dense(completions[-1].top_logprobs, 0, self.n_vocab)

    # ----- the adapter calls ---------------------------------------------------------------

    async def next_token_logprobs(
        self, adapter: Adapter, rows: Sequence[Sequence[int]], shared: int, *,
        reuse: bool = True, read: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One ``n_predict: 1`` request per row with the adapter on; ``[rows, vocab]``
        log-probabilities: the top ``n_probs`` tokens, ``-inf`` elsewhere, or a wider top
        (4,096) or the whole vocabulary when the top does not decide the tokens the caller
        reads (``probabilities.read_sizes``: the long-conversation zeros of issue 34)."""
        wanted = probs.read_mask(read, self.n_vocab)  # what the caller reads decides
        out = []
        for row in rows:
            ids = list(row)
            adapter.strategy.require_activation(adapter, ids)
            completions: list[Completion] = []
            for n_probs in probs.read_sizes(self.n_probs, self.n_vocab):
                dense = await self._ask(adapter, ids, n_probs, reuse, completions)
                if probs.decided(dense, wanted, complete=probs.complete(dense)):
                    break
            else:
                raise probs.undecided(dense)
            self.counts.record(completions, reusable(adapter, len(ids), shared))
            out.append(dense)
        return torch.stack(out) if out else torch.empty(0, self.n_vocab)

    async def adapter_decode(
        self, adapter: Adapter, ids: list[int], shared: int, *, grammar: str | None,
        max_new_tokens: int, reuse: bool,
    ) -> tuple[list[int], list[torch.Tensor]]:
        """Greedy decoding with ``adapter`` on: one request per token on the adapter's lane
        (``decoder``), the grammar applied client-side and its forced tokens fast-forwarded."""
        scores: list[torch.Tensor] = []
        new_ids = await self.step_generate(
            adapter, ids, shared, grammar=grammar, reuse=reuse, fast_forward=True,
            gen_kwargs={"max_new_tokens": max_new_tokens}, scores_out=scores)
        return new_ids, scores
