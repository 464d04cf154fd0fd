"""Base-model generation with KV prefix reuse; runs in a worker thread under the model lock.

The event loop never runs model code: the backend hands a ``GenerationRequest`` to a thread,
which streams text deltas through a callback and returns the new token ids. Cancellation is a
``StoppingCriteria`` watching an event, so ``generate`` stops at the next token instead of
running to ``max_new_tokens`` after nobody is listening.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList, TextStreamer

from mellea_local.backends.cache_compat import cache_kwarg_name, output_cache
from mellea_local.options import DEFAULT_MAX_NEW_TOKENS

if TYPE_CHECKING:
    from mellea_local.adapters.loaded import Adapter
    from mellea_local.backends.hf.engine import Engine


class _CancelCriteria(StoppingCriteria):
    def __init__(self, event: threading.Event) -> None:
        self._event = event

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kw: Any) -> Any:
        return torch.full((input_ids.shape[0],), self._event.is_set(), dtype=torch.bool,
                          device=input_ids.device)


class _DeltaStreamer(TextStreamer):
    """Decodes generated tokens incrementally and hands each finished piece of text on."""

    def __init__(self, tokenizer: Any, on_text: Callable[[str], None]) -> None:
        super().__init__(tokenizer, skip_prompt=True, skip_special_tokens=True)
        self._on_text = on_text

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        if text:
            self._on_text(text)


@contextlib.contextmanager
def seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed sampling for one call without touching the process-wide RNG state."""
    if seed is None:
        yield
        return
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(seed))
        yield


@dataclass
class GenerationRequest:
    prompt_ids: list[int]
    gen_kwargs: dict[str, Any] = field(default_factory=dict)
    logits_processors: list[Any] = field(default_factory=list)
    seed: int | None = None
    on_text: Callable[[str], None] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    adapter: Adapter | None = None
    """An agent adapter active from its invocation on (an agent step); None: the base."""


@dataclass
class GenerationResult:
    new_ids: list[int]
    stopped_by_eos: bool
    cancelled: bool
    model_seconds: float = 0.0
    """Time the call held the model (waiting for it behind other calls excluded)."""
    model_cpu_seconds: float = 0.0
    """CPU time of the worker thread meanwhile (all the work with one torch thread)."""


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    ids = eos if isinstance(eos, list) else [eos]
    return {int(i) for i in ids if i is not None}


def default_budget(model: Any, prompt_tokens: int) -> int:
    """New tokens for a call that set no budget: the model's generation_config
    ``max_new_tokens`` when it has one, else ``DEFAULT_MAX_NEW_TOKENS`` (transformers' own
    default is 20), at most the positions left after the prompt."""
    own = getattr(model.generation_config, "max_new_tokens", None)
    budget = own if isinstance(own, int) and own > 0 else DEFAULT_MAX_NEW_TOKENS
    positions = getattr(model.config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > prompt_tokens:
        budget = min(budget, positions - prompt_tokens)
    return max(budget, 1)


def _cache_plan(engine: Engine, req: GenerationRequest) -> dict[str, Any]:
    """What :meth:`Engine.reusing` is told for ``req``.

    A base generation offers its whole prompt and keeps what it made. An agent step
    (``req.adapter``) offers only the tokens before the adapter acts (an aLoRA: up to its
    invocation, the assistant header; a LoRA: none, ``base_cache_prefix``) and stores the
    cache cropped back to them: the adapted header and step never enter the shared cache, so
    the next step and any requirement check read base K/V only.
    """
    adapter = req.adapter
    if adapter is None:
        return {"key": req.prompt_ids, "reusable": len(req.prompt_ids) - 1}
    strategy = adapter.strategy
    strategy.require_activation(adapter, req.prompt_ids)
    shared = strategy.activation_start(adapter, req.prompt_ids)
    cached = strategy.base_cache_prefix(shared, reuse=engine.prefix_cache.enabled)
    return {"key": req.prompt_ids[: shared + 1], "reuse": cached > 0, "base": shared,
            "reusable": cached, "unreusable": strategy.base_cache_prefix(shared) == 0 < shared}


def generate_base(engine: Engine, req: GenerationRequest) -> GenerationResult:
    """Generate with the base model (or an agent step with ``req.adapter`` on), reusing and
    then storing the KV prefix cache.

    Holds the model lock for the whole call; the cache rule is the engine's
    (:meth:`Engine.reusing`): on any failure the checked-out cache is given back, never
    stored half-extended. With an adapter the generation runs through PEFT (it places an
    aLoRA at the last occurrence of its invocation, as in training) and the adapter is off
    again however the call ends (``ModelHolder.using``).
    """
    model, tokenizer = engine.model, engine.tokenizer
    device = model.device
    with engine.lock:
        started, started_cpu = time.perf_counter(), time.thread_time()
        engine.holder.assert_base()
        if req.cancel.is_set():  # cancelled while waiting for the model: nothing to run
            return GenerationResult(new_ids=[], stopped_by_eos=False, cancelled=True)
        plan = _cache_plan(engine, req)
        ids = torch.tensor([req.prompt_ids], device=device)
        kwargs = dict(req.gen_kwargs)
        if "max_new_tokens" not in kwargs and "max_length" not in kwargs:
            kwargs["max_new_tokens"] = default_budget(model, len(req.prompt_ids))
        if kwargs.get("stop_strings"):
            kwargs["tokenizer"] = tokenizer
        kwargs.setdefault("pad_token_id", tokenizer.pad_token_id)
        with engine.reusing(**plan) as prefix, contextlib.ExitStack() as stack:
            runner = model if req.adapter is None else stack.enter_context(
                engine.holder.using(req.adapter.name))
            with torch.no_grad(), seeded(req.seed, device):
                out = runner.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    use_cache=True,
                    return_dict_in_generate=True,
                    stopping_criteria=StoppingCriteriaList([_CancelCriteria(req.cancel)]),
                    logits_processor=LogitsProcessorList(req.logits_processors),
                    streamer=_DeltaStreamer(tokenizer, req.on_text) if req.on_text else None,
                    **{cache_kwarg_name(model): prefix.cache},
                    **kwargs,
                )
            sequence = out.sequences[0]
            prefix.fed = len(req.prompt_ids) - prefix.reused
            # A generation stopped early (cancelled) still holds exact K/V of what it made
            # (an agent step's is cropped back to its base part by ``reusing``).
            prefix.result, prefix.result_ids = output_cache(out), sequence
        model_seconds = time.perf_counter() - started
        model_cpu_seconds = time.thread_time() - started_cpu
    new_ids = sequence[len(req.prompt_ids):].tolist()
    return GenerationResult(
        new_ids=new_ids,
        stopped_by_eos=bool(new_ids) and new_ids[-1] in _eos_ids(model, tokenizer),
        cancelled=req.cancel.is_set(),
        model_seconds=model_seconds,
        model_cpu_seconds=model_cpu_seconds,
    )
