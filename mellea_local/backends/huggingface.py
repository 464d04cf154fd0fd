"""``LocalHFBackend``: a transformers model on CPU or GPU behind the ``Backend`` interface.

This module only wires the stages together: rendering (context -> token ids), generation (a
worker thread with KV prefix reuse), parsing (text -> content, thinking, tool calls) and the
adapters. Each stage lives in its own module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from mellea_local.adapters import AdapterSource, resolve_adapter
from mellea_local.adapters.catalog import require_intrinsic_name
from mellea_local.adapters.transformations import TokenLogprob
from mellea_local.backends.adapter_calls import (
    adapter_generate,
    compact_json_grammar,
    last_logits,
    last_logits_locked,
    token_logprobs,
)
from mellea_local.backends.adapter_registry import (
    Adapter,
    LoadedAdapters,
    check_adapter_name,
    check_base_fit,
    check_config,
    check_tokenizer_fit,
    check_weight_fit,
    describe,
    intrinsic_of,
)
from mellea_local.backends.constrained import GrammarLogitsProcessor, json_schema_grammar
from mellea_local.backends.cross_batch import CheckBatcher
from mellea_local.backends.finish import GenerationOutput, finish_thunk, prompt_opens_thinking
from mellea_local.backends.generation import GenerationRequest, GenerationResult, generate_base
from mellea_local.backends.kv_cache import DEFAULT_TOKEN_BUDGET, PrefixCache
from mellea_local.backends.loading import (
    check_cache_budget,
    check_model_name,
    check_model_options,
    load_pretrained,
    resolve_device,
    resolve_dtype,
    resolve_model_source,
)
from mellea_local.backends.model_holder import ModelHolder
from mellea_local.backends.quiet import quiet_loading
from mellea_local.backends.stats import CacheStats
from mellea_local.backends.workers import start_worker
from mellea_local.core.backend import REQUIREMENT_CHECK, Backend
from mellea_local.core.component import Span
from mellea_local.core.context import Context
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import AdapterError, AdapterNotFoundError
from mellea_local.inputs import check_format
from mellea_local.intrinsics.requirement_check import RequirementScoring
from mellea_local.options import ModelOption, check_options, merge_options
from mellea_local.rendering.prompt import check_prompt_fits, position_limit
from mellea_local.rendering.request import render_request


class LocalHFBackend(RequirementScoring, Backend):
    """Run a Hugging Face causal LM locally, with aLoRA-aware KV reuse.

    ``model`` is a local folder or a hub id (the hub cache is honoured; with
    ``HF_HUB_OFFLINE=1`` a missing model fails at once). Weights load from safetensors only
    unless ``allow_pickle=True``; remote code runs only with ``trust_remote_code=True``.
    ``kv_cache_tokens`` bounds the prefix cache (0 disables reuse).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        model_options: dict[str, Any] | None = None,
        revision: str | None = None,
        trust_remote_code: bool = False,
        allow_pickle: bool = False,
        kv_cache_tokens: int = DEFAULT_TOKEN_BUDGET,
    ) -> None:
        check_model_name(model)  # every argument is checked before any load
        check_cache_budget(kv_cache_tokens)
        check_model_options(model_options)
        dev = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, dev)
        model = resolve_model_source(model)  # a .gguf, a registered name -> a cached folder
        lm, tokenizer = load_pretrained(
            model,
            device=dev,
            dtype=torch_dtype,
            revision=revision,
            trust_remote_code=trust_remote_code,
            allow_pickle=allow_pickle,
        )
        self._init(lm, tokenizer, str(model), model_options, kv_cache_tokens)

    @classmethod
    def from_loaded(
        cls,
        model: Any,
        tokenizer: Any,
        *,
        model_id: str | None = None,
        model_options: dict[str, Any] | None = None,
        kv_cache_tokens: int = DEFAULT_TOKEN_BUDGET,
    ) -> LocalHFBackend:
        """Wrap a model and tokenizer you already loaded (no copy; the backend owns them now)."""
        check_cache_budget(kv_cache_tokens)
        check_model_options(model_options)
        self = cls.__new__(cls)
        name = model_id or getattr(model.config, "name_or_path", None) or type(model).__name__
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.eval()
        self._init(model, tokenizer, name, model_options, kv_cache_tokens)
        # A model loaded without a name cannot say which base it is: adapters are not
        # checked against one.
        self._base_identity = model_id or getattr(model.config, "name_or_path", None) or None
        return self

    def _init(
        self,
        model: Any,
        tokenizer: Any,
        model_id: str,
        model_options: dict[str, Any] | None,
        kv_cache_tokens: int,
    ) -> None:
        check_options(model_options)
        self.model_id = model_id
        self._base_identity: str | None = model_id
        self.model_options = dict(model_options or {})
        self._holder = ModelHolder(model, tokenizer)
        self._positions = position_limit(model, tokenizer)
        self._prefix_cache = PrefixCache(kv_cache_tokens)
        self._registry = LoadedAdapters()
        self._adapters = self._registry.adapters  # the same dict, read by the lookups below
        self.stats = CacheStats(self._prefix_cache)
        self._batcher = CheckBatcher(
            self._holder, self._prefix_cache, self.stats,
            lambda adapter, row, shared: last_logits_locked(
                self._holder, self._prefix_cache, self.stats, adapter, [row], shared))

    # ----- introspection -------------------------------------------------------------------

    def __repr__(self) -> str:
        dtype = str(self.model.dtype).removeprefix("torch.")
        return (f"{type(self).__name__}(model={self.model_id!r}, device='{self.device}', "
                f"dtype={dtype!r}, adapters={sorted(self._adapters)!r})")

    @property
    def model(self) -> Any:
        return self._holder.model

    @property
    def tokenizer(self) -> Any:
        return self._holder.tokenizer

    @property
    def device(self) -> torch.device:
        return self._holder.model.device

    @property
    def prefix_cache(self) -> PrefixCache:
        return self._prefix_cache

    @property
    def base_model_name(self) -> str:
        return Path(self.model_id.rstrip("/")).name

    @property
    def base_parameter_count(self) -> int:
        """Parameters of the base model alone: PEFT adds every loaded adapter's to ``model``."""
        return sum(p.numel() for name, p in self.model.named_parameters() if "lora_" not in name)

    # ----- rendering -----------------------------------------------------------------------

    def render(
        self,
        action: Span | None,
        ctx: Context,
        *,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
        add_generation_prompt: bool = True,
    ) -> tuple[list[int], dict[str, tuple[Any, dict[str, Any]]], dict[str, Any]]:
        """Token ids for ``ctx`` + ``action``, the tools offered, and the generate() kwargs.

        Public so callers (benchmarks, the CLI) can see exactly what the model will read.
        """
        return render_request(
            self.tokenizer, action, ctx, base_options=self.model_options,
            model_options=model_options, model_id=self.model_id, positions=self._positions,
            tool_calls=tool_calls, add_generation_prompt=add_generation_prompt,
        )

    # ----- generation ----------------------------------------------------------------------

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
        ids, tools, gen_kwargs = self.render(
            action, ctx, model_options=model_options, tool_calls=tool_calls
        )
        processors: list[Any] = []
        if format is not None:
            processors.append(GrammarLogitsProcessor(
                self.tokenizer,
                json_schema_grammar(format.model_json_schema()),
                vocab_size=self.model.get_output_embeddings().weight.shape[0],
                prompt_len=len(ids),
            ))
        mot: ModelOutputThunk[Any] = ModelOutputThunk(None)
        request = GenerationRequest(
            prompt_ids=ids,
            gen_kwargs=gen_kwargs,
            logits_processors=processors,
            seed=opts.get(ModelOption.SEED),
            on_text=mot._push_delta if opts.get(ModelOption.STREAM) else None,
        )
        thinking_started = prompt_opens_thinking(self.tokenizer, ids)
        result: list[GenerationResult] = []

        def post_process(out: ModelOutputThunk[Any]) -> None:
            self._finish_thunk(out, result[0], request, tools, format, thinking_started,
                              tool_calls)

        mot._start_generation(action=action, cancel_hook=request.cancel.set,
                              post_process=post_process)

        def work() -> None:
            try:
                result.append(generate_base(self._holder, self._prefix_cache, self.stats, request))
            except BaseException as exc:
                mot._push_error(exc)
            else:
                mot._push_done()

        # A plain thread, not the default executor: a cancelled call must not pin an executor
        # slot, and the model lock already serialises the work. Registered, so that the
        # process never exits while it is inside torch (see ``workers``).
        start_worker(work, request.cancel, name="mellea-local-generate")
        return mot, ctx.add(action).add(mot)

    def _finish_thunk(
        self,
        mot: ModelOutputThunk[Any],
        gen: GenerationResult,
        request: GenerationRequest,
        tools: Mapping[str, tuple[Any, dict[str, Any]]],
        format: type[Any] | None,
        thinking_started: bool,
        request_tools: bool,
    ) -> None:
        mot.meta["model_seconds"] = gen.model_seconds  # queueing for the model excluded
        mot.meta["model_cpu_seconds"] = gen.model_cpu_seconds
        finish_thunk(
            mot, GenerationOutput(gen.new_ids, len(request.prompt_ids), gen.stopped_by_eos,
                                  gen.cancelled),
            tokenizer=self.tokenizer, provider="huggingface", model_id=self.model_id,
            streaming=request.on_text is not None,
            stop_strings=request.gen_kwargs.get("stop_strings") or [], tools=tools,
            format=format, thinking_started=thinking_started, request_tools=request_tools,
        )

    # ----- adapters ------------------------------------------------------------------------

    @property
    def adapters(self) -> dict[str, Adapter]:
        """Loaded adapters by name (a copy)."""
        return dict(self._adapters)

    def add_adapter(
        self,
        source: AdapterSource,
        *,
        name: str | None = None,
        roots: Sequence[str | os.PathLike[str]] | None = None,
        intrinsic: str | None = None,
        allow_other_base: bool = False,
    ) -> Adapter:
        """Load an adapter folder, or an intrinsic (e.g. ``"requirement-check"``) by name.

        An intrinsic name is looked up in the adapter libraries (``roots``, default: the
        bundled ones) for this base model, preferring an aLoRA. The intrinsic an adapter
        serves comes from ``intrinsic=``, else from the library layout
        (``<intrinsic>/<base>/<alora|lora>/``). The adapter must fit this model and tokenizer,
        be trained on it (``allow_other_base=True`` accepts an adapter whose config names
        another base, for a copy or fine-tune of it), and its io.yaml must use only features
        this package implements (``check_supported``).

        Adding is all or nothing: a refused or failed load leaves the backend exactly as it
        was. Adding a folder that is already loaded returns the loaded ``Adapter``; a name
        already taken by another folder is an error.
        """
        name = check_adapter_name(name)
        resolved = resolve_adapter(source, base_model=self.model_id, roots=roots)
        if intrinsic is not None:
            resolved = dataclasses.replace(resolved, intrinsic=require_intrinsic_name(intrinsic))
        resolved.io_config.check_supported()
        auto = f"{intrinsic_of(resolved) or resolved.path.name}_{resolved.kind.value}"
        same = self._registry.loaded_from(resolved)
        if same is not None and name in (None, same.name) and (
                same.intrinsic == intrinsic_of(resolved)):
            return same
        name = name or auto
        self._registry.refuse_clash(name, source, resolved)
        if not allow_other_base:
            check_base_fit(resolved, self._base_identity)
        check_tokenizer_fit(resolved, self.tokenizer)
        keys = check_weight_fit(resolved, self.model, check_config(resolved))
        with self._holder.lock, quiet_loading():
            try:
                self._holder.load_adapter(resolved.path, name, weight_keys=keys)
            except AdapterError:
                raise
            except Exception as exc:
                raise AdapterError(
                    f"PEFT could not load the adapter at {resolved.path} onto {self.model_id} "
                    f"({type(exc).__name__}: {exc}); the backend is unchanged. Check "
                    f"{resolved.config_path} and the weights: save the adapter again with "
                    "PeftModel.save_pretrained for this base model."
                ) from exc
        return self._registry.add(describe(resolved, name, self.tokenizer), resolved)

    def unload_adapter(self, name: str) -> None:
        """Remove a loaded adapter; the name and the memory it held are free again."""
        if name not in self._registry.adapters:
            raise AdapterNotFoundError(
                f"No adapter named {name!r} is loaded (loaded: {sorted(self._registry.adapters)})"
                "; nothing to unload."
            )
        with self._holder.lock:
            self._holder.unload_adapter(name)
        self._registry.remove(name)

    def adapter_for(self, intrinsic: str, *, name: str | None = None) -> Adapter:
        """The adapter serving ``intrinsic``: the one named, else an aLoRA, else a LoRA."""
        return self._registry.adapter_for(intrinsic, name=name)

    def supports_intrinsic(self, name: str) -> bool:
        return self._registry.serves(name)

    # ----- the adapter-runner interface (mellea_local.adapters.runner.AdapterRunner) -----------

    async def next_token_logprobs(
        self, adapter: Adapter, rows: Sequence[Sequence[int]], shared: int, *,
        reuse: bool = True,
    ) -> torch.Tensor:
        """Next-token log-probabilities after each row with ``adapter`` on (``adapter_calls``)."""
        check_prompt_fits(max(map(len, rows), default=0), self._positions, self.model_id,
                          generating=False)
        if (len(rows) == 1 and reuse and adapter.strategy.reuses_base_cache
                and self._prefix_cache.enabled):
            # One conversation's check: batched with other conversations' waiting ones.
            logits = await asyncio.to_thread(self._batcher.run, adapter, list(rows[0]), shared)
        else:
            logits = await asyncio.to_thread(
                last_logits, self._holder, self._prefix_cache, self.stats, adapter, rows,
                shared, reuse=reuse,
            )
        return torch.log_softmax(logits, dim=-1)

    async def generate_with_adapter(
        self, adapter: Adapter, ids: Sequence[int], shared: int, *,
        json_schema: Mapping[str, Any] | None, max_new_tokens: int, top_logprobs: int,
        reuse: bool = True,
    ) -> list[TokenLogprob]:
        """Greedy, schema-constrained generation with ``adapter`` on, with top-k logprobs."""
        check_prompt_fits(len(ids), self._positions, self.model_id, generating=True)
        processors = []
        if json_schema is not None:
            processors.append(GrammarLogitsProcessor(
                self.tokenizer, compact_json_grammar(json_schema),
                self.model.get_output_embeddings().weight.shape[0], len(ids), fast_forward=True))
        new_ids, scores = await asyncio.to_thread(
            adapter_generate, self._holder, self._prefix_cache, self.stats, adapter, ids,
            shared, processors=processors, max_new_tokens=max_new_tokens, reuse=reuse,
        )
        return token_logprobs(self.tokenizer, new_ids, scores, top_logprobs)

    @classmethod
    def embedded(
        cls,
        *,
        device: str | torch.device = "cpu",
        model_options: dict[str, Any] | None = None,
        kv_cache_tokens: int = DEFAULT_TOKEN_BUDGET,
    ) -> LocalHFBackend:
        """The shipped trained model, ``mellea-tiny-chat``, with its requirement-check adapters.

        Nothing is downloaded: the base loads from the package's safetensors and the adapters
        from the local libraries (the repo's ``adapters/``, or the copy bundled in the wheel),
        in well under two seconds on a CPU, so demos and end-to-end tests work anywhere. The
        aLoRA serves ``requirement-check``; the plain LoRA is loaded beside it as
        ``requirement-check_lora`` for comparisons. float32 always: the adapters were trained
        against float32 activations and the model is too small for bf16 to pay off.
        """
        from mellea_local.adapters import default_library_roots, find_in_library
        from mellea_local.embedded import trained_weights_dir
        from mellea_local.errors import ModelLoadError

        weights = trained_weights_dir()
        if not (weights / "model.safetensors").is_file():
            raise ModelLoadError(
                f"The embedded model is missing from {weights}; reinstall mellea-local or "
                "rebuild it with `python scripts/train_embedded.py`."
            )
        backend = cls(weights, device=device, dtype=torch.float32,
                      model_options=model_options, kv_cache_tokens=kv_cache_tokens)
        roots = default_library_roots()
        for kind in ("alora", "lora"):
            found = find_in_library(REQUIREMENT_CHECK, weights, roots=roots, kinds=(kind,))
            if found is None:
                raise AdapterNotFoundError(
                    f"The embedded model's requirement-check {kind} is in none of the adapter "
                    f"libraries {[str(r) for r in roots]}; reinstall mellea-local or rebuild it "
                    "with `python scripts/train_embedded.py`."
                )
            backend.add_adapter(found.path, name=f"requirement-check_{kind}")
        return backend
