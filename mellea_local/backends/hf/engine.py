"""``Engine``: the one object that owns a local model's invariants.

Why one object: the model, its lock, the KV prefix cache, the token counters and the
cross-conversation batcher are used together by every call (a generation, a check, an adapter
generation, a batch of checks), and the rules between them ("no adapter left active", "the cache
holds base K/V only", "a failed call leaves the cache as it was") must hold for each. They are
written once here: :meth:`Engine.reusing` is the cache rule (take, discard on failure, crop to
base, store, record) and every call site goes through it.

``LocalHFBackend.engine`` is the public handle: benchmarks and tests read the holder, the cache
and the batcher through it, never through a backend's private attributes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from mellea_local.adapters import ResolvedAdapter
from mellea_local.adapters.loaded import Adapter
from mellea_local.backends.adapter_registry import check_config, check_weight_fit
from mellea_local.backends.cache_compat import crop_to, new_cache
from mellea_local.backends.constrained import GrammarLogitsProcessor
from mellea_local.backends.delegate import delegated
from mellea_local.backends.finish import GenerationOutput
from mellea_local.backends.hf.adapter_calls import (
    adapter_generate,
    last_logits,
    last_logits_locked,
    mixed_last_logits,
)
from mellea_local.backends.hf.cross_batch import CheckBatcher
from mellea_local.backends.hf.generation import GenerationRequest, GenerationResult, generate_base
from mellea_local.backends.hf.model_holder import ModelHolder
from mellea_local.backends.kv_cache import PrefixCache
from mellea_local.backends.quiet import quiet_loading
from mellea_local.backends.stats import CacheStats
from mellea_local.backends.workers import start_worker
from mellea_local.errors import AdapterError

if TYPE_CHECKING:
    from mellea_local.backends.serving import ServingRequest

__all__ = ["Checkout", "Engine"]


@dataclass(eq=False)
class Checkout:
    """A cache lent to one call by :meth:`Engine.reusing`, holding the first ``reused`` tokens.

    The call feeds ``cache`` to the model, then says what it did: ``fed`` (tokens it ran
    through the model; left ``None`` when nothing ran, so nothing is recorded), and for a
    generation the cache the model returned (``result``) with the ids it covers
    (``result_ids``): what gets stored when it is not ``cache`` itself.
    """

    cache: Any
    reused: int
    fed: int | None = None
    result: Any = None
    result_ids: Any = None  # token ids (a list or a tensor row)
    abandoned: bool = False

    def abandon(self) -> None:
        """Give the cache up unused: nothing is stored back or recorded."""
        self.abandoned = True


class Engine:
    """A transformers model with its lock, prefix cache, token counters and check batcher.

    A ``ServingEngine``: it declares ``mixed_adapters`` (PEFT scores rows with different
    aLoRAs in one forward over a shared base cache), loads admitted adapters into PEFT and
    produces a generation (``produce``: base generation on a worker thread).
    """

    mixed_adapters = True
    agent_steps = True  # produce decodes a step with the agent aLoRA on (hf/generation.py)

    def __init__(self, model: Any, tokenizer: Any, kv_cache_tokens: int) -> None:
        self.holder = ModelHolder(model, tokenizer)
        """The model, the tokenizer, the PEFT wrapper and the lock serialising them."""
        self.prefix_cache = PrefixCache(kv_cache_tokens)
        """Base-model K/V of recent prompts, lent to calls that continue them."""
        self.stats = CacheStats(self.prefix_cache)
        """Tokens prefilled and reused, per call and in total (``backend.stats``)."""
        self.batcher = CheckBatcher(
            self, lambda adapter, row, shared: last_logits_locked(self, adapter, [row], shared))
        """Coalesces checks of different conversations that wait at the same time."""

    model: delegated[Any] = delegated("holder.model")
    tokenizer: delegated[Any] = delegated("holder.tokenizer")
    lock: delegated[Any] = delegated(
        "holder.lock", "Held by every call for as long as it uses the model.")

    # ----- adapters (admitted by ServingBackend.admit_adapter first) ----------------------

    def load_adapter(self, resolved: ResolvedAdapter, name: str) -> None:
        """Check the weights against this model, then load them into PEFT as ``name``; a
        refusal or a failed load leaves the model as it was."""
        keys = check_weight_fit(resolved, self.model, check_config(resolved))
        with self.lock, quiet_loading():
            try:
                self.holder.load_adapter(resolved.path, name, weight_keys=keys)
            except AdapterError:
                raise
            except Exception as exc:
                model = getattr(self.model.config, "name_or_path", None) or "this model"
                raise AdapterError(
                    f"PEFT could not load the adapter at {resolved.path} onto {model} "
                    f"({type(exc).__name__}: {exc}); the backend is unchanged. Check "
                    f"{resolved.config_path} and the weights: save the adapter again with "
                    "PeftModel.save_pretrained for this base model."
                ) from exc

    def unload_adapter(self, name: str) -> None:
        """Remove ``name`` from PEFT, freeing its weights."""
        with self.lock:
            self.holder.unload_adapter(name)

    # ----- generation (ServingEngine.produce; the lifecycle is ServingBackend's) -------------

    def check_request(self, request: ServingRequest) -> None:
        """Nothing to refuse up front: ``render`` already held the prompt to the model's
        positions, and the rest is checked on the worker."""

    async def produce(self, request: ServingRequest) -> GenerationOutput:
        """``request`` generated on a worker thread (``_produce``), awaited here.

        A plain thread, not the default executor: a cancelled call must not pin an executor
        slot, and the model lock already serialises the work. Registered, so that the process
        never exits while it is inside torch (see ``workers``). The awaiting task being
        cancelled does not stop the worker: the thunk's cancel hook (``request.cancel``) does.
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[GenerationOutput] = loop.create_future()

        def settle(result: GenerationOutput | None, exc: BaseException | None) -> None:
            if done.cancelled():
                return
            if exc is not None:
                done.set_exception(exc)
            else:
                done.set_result(result)  # type: ignore[arg-type]

        def work() -> None:
            result: GenerationOutput | None = None
            error: BaseException | None = None
            try:
                result = self._produce(request)
            except BaseException as exc:  # handed to the awaiting task
                error = exc
            # A closed loop (RuntimeError) means the consumer is gone: nobody reads it.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, result, error)

        start_worker(work, request.cancel, name="mellea-local-generate")
        return await done

    def _produce(self, request: ServingRequest) -> GenerationOutput:
        processors: list[Any] = []
        if request.grammar is not None:
            processors.append(GrammarLogitsProcessor(
                self.tokenizer, request.grammar,
                vocab_size=self.model.get_output_embeddings().weight.shape[0],
                prompt_len=len(request.prompt_ids),
                budget=request.gen_kwargs.get("max_new_tokens")
                if request.closing_reserve is not None else None,
                reserve=request.closing_reserve or 0,
            ))
        gen = self.generate(GenerationRequest(
            prompt_ids=request.prompt_ids, gen_kwargs=request.gen_kwargs,
            logits_processors=processors, seed=request.seed, on_text=request.on_text,
            cancel=request.cancel, adapter=request.adapter,
        ))
        request.meta["model_seconds"] = gen.model_seconds  # queueing for the model excluded
        request.meta["model_cpu_seconds"] = gen.model_cpu_seconds
        return GenerationOutput(gen.new_ids, len(request.prompt_ids), gen.stopped_by_eos,
                                gen.cancelled)

    # ----- the calls (each runs in a worker thread and takes the model lock) -----------------

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """Base-model generation with KV prefix reuse (``generation.generate_base``)."""
        return generate_base(self, request)

    def last_logits(self, adapter: Adapter, rows: Sequence[Sequence[int]], shared: int, *,
                    reuse: bool = True) -> torch.Tensor:
        """Next-token logits after each row with ``adapter`` on (``adapter_calls``)."""
        return last_logits(self, adapter, rows, shared, reuse=reuse)

    def mixed_last_logits(self, calls: Sequence[tuple[Adapter, Sequence[int]]],
                          shared: int) -> torch.Tensor:
        """Next-token logits after each row with its own aLoRA on, in one forward
        (``adapter_calls.mixed_last_logits``)."""
        return mixed_last_logits(self, calls, shared)

    def adapter_generate(self, adapter: Adapter, ids: Sequence[int], shared: int, *,
                         processors: Sequence[Any] = (), max_new_tokens: int = 16,
                         reuse: bool = True) -> tuple[list[int], list[torch.Tensor]]:
        """Greedy generation with ``adapter`` on; new ids and the processed scores."""
        return adapter_generate(self, adapter, ids, shared, processors=processors,
                                max_new_tokens=max_new_tokens, reuse=reuse)

    # ----- the cache rule ------------------------------------------------------------------

    @contextlib.contextmanager
    def reusing(
        self, key: Sequence[int], *, reuse: bool = True, base: int | None = None,
        reusable: int, unreusable: bool = False,
    ) -> Iterator[Checkout]:
        """The cache rule, for one call (model lock held).

        Takes the longest cached prefix of ``key`` (a fresh cache on a miss, or when ``reuse``
        is off), and when the call fails gives it back intact (``discard``). When it succeeds
        the cache is cropped to ``base`` tokens (an adapter's K/V dropped, so the store holds
        base K/V only) and stored under ``key[:base]``; with ``base=None`` the call's
        ``result`` is stored under its ``result_ids`` instead (a generation keeps what it
        made). The call is then recorded in the stats, ``reusable`` being the prefix it offered
        for reuse, ``unreusable`` whether the call's adapter cannot read base K/V at all (a
        plain LoRA: ``stats.unreusable_calls``).
        """
        taken, reused = self.prefix_cache.take(key) if reuse else (None, 0)
        checkout = Checkout(taken if taken is not None else new_cache(self.model), reused)
        try:
            yield checkout
        except BaseException:
            if taken is not None:
                self.prefix_cache.discard(taken)
            raise
        if checkout.abandoned:
            if taken is not None:
                self.prefix_cache.discard(taken)
            return
        if reuse:
            if base is None:
                kept, ids = checkout.result, checkout.result_ids
            else:
                kept = checkout.result if checkout.result is not None else checkout.cache
                crop_to(kept, base)  # drop the adapter's K/V: the cache is base-only again
                ids = list(key[:base])
                if kept is taken and checkout.reused == base and self.prefix_cache.give_back(
                        kept):
                    # A loan back as it was lent (a warm check): its entry stays as it is,
                    # with nothing to store or discard.
                    kept = taken = None
            if kept is not None:
                self.prefix_cache.store(ids if ids is not None else [], kept)
            if taken is not None and taken is not kept:
                self.prefix_cache.discard(taken)
        if checkout.fed is not None:
            self.stats.record(prefilled=checkout.fed, reused=checkout.reused,
                              reusable=reusable, unreusable=unreusable)
