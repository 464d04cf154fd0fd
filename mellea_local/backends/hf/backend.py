"""``LocalHFBackend``: a transformers model on CPU or GPU behind the ``Backend`` interface.

This module only wires the stages together: the generation lifecycle is ``ServingBackend``'s
(``backends/serving.py``: render, start, finish the thunk), the model work is the ``Engine``'s
(``engine.py``: generation, adapter forwards, the prefix cache), and the adapters' bookkeeping
is ``adapter_registry``'s. Each stage lives in its own module.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch

from mellea_local.backends.adapter_registry import (
    Adapter,
    LoadedAdapters,
)
from mellea_local.backends.constrained import (
    GrammarLogitsProcessor,
)
from mellea_local.backends.delegate import delegated
from mellea_local.backends.hf.adapter_calls import mixed_batchable
from mellea_local.backends.hf.engine import Engine
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
from mellea_local.backends.serving import ServingBackend
from mellea_local.backends.stats import CacheStats
from mellea_local.core.backend import REQUIREMENT_CHECK
from mellea_local.errors import AdapterNotFoundError
from mellea_local.options import check_options
from mellea_local.rendering.prompt import check_prompt_fits, position_limit
from mellea_local.threads import apply_default_threads


class LocalHFBackend(ServingBackend):
    """Run a Hugging Face causal LM locally, with aLoRA-aware KV reuse.

    ``model`` is a local folder or a hub id (the hub cache is honoured; with
    ``HF_HUB_OFFLINE=1`` a missing model fails at once). Weights load from safetensors only
    unless ``allow_pickle=True``; remote code runs only with ``trust_remote_code=True``.
    ``kv_cache_tokens`` bounds the prefix cache (0 disables reuse).

    The generation lifecycle is ``ServingBackend``'s and the tokens are produced by the
    ``Engine`` (``Engine.produce``, a worker thread); this class supplies the adapter calls.
    ``engine`` is the public handle on the model, its lock, the prefix cache, the stats and
    the batcher.
    """

    provider: ClassVar[str] = "huggingface"

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
        apply_default_threads(getattr(model, "device", "cpu"))  # on purpose: threads.py
        self.model_id = model_id
        self._base_identity: str | None = model_id
        self.model_options = dict(model_options or {})
        self.engine = Engine(model, tokenizer, kv_cache_tokens)
        """The model with its lock, prefix cache, token counters and check batcher."""
        self._positions = position_limit(model, tokenizer)
        self._registry = LoadedAdapters()

    # ----- introspection -------------------------------------------------------------------

    def __repr__(self) -> str:
        dtype = str(self.model.dtype).removeprefix("torch.")
        return (f"{type(self).__name__}(model={self.model_id!r}, device='{self.device}', "
                f"dtype={dtype!r}, adapters={sorted(self._registry.adapters)!r})")

    model: delegated[Any] = delegated("engine.model")
    tokenizer: delegated[Any] = delegated("engine.tokenizer")  # type: ignore[assignment]
    device: delegated[torch.device] = delegated("engine.model.device")
    prefix_cache: delegated[PrefixCache] = delegated("engine.prefix_cache")
    stats: delegated[CacheStats] = delegated(
        "engine.stats", "Tokens prefilled and reused by this backend's calls (``CacheStats``).")

    @property
    def base_model_name(self) -> str:
        return Path(self.model_id.rstrip("/")).name

    @property
    def base_parameter_count(self) -> int:
        """Parameters of the base model alone: PEFT adds every loaded adapter's to ``model``."""
        return sum(p.numel() for name, p in self.model.named_parameters() if "lora_" not in name)

    # generation: the lifecycle is ServingBackend's, the tokens the Engine's (Engine.produce).

    # adapters: add_adapter / unload_adapter / adapter_for are ServingBackend's (one
    # admission path); the engine loads the weights into PEFT (Engine.load_adapter).

    # ----- the adapter-runner interface (mellea_local.adapters.runner.AdapterRunner) -----------

    async def next_token_logprobs(
        self, adapter: Adapter, rows: Sequence[Sequence[int]], shared: int, *,
        reuse: bool = True, read: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Next-token log-probabilities after each row with ``adapter`` on (``adapter_calls``);
        the whole vocabulary is computed, so ``read`` needs nothing."""
        check_prompt_fits(max(map(len, rows), default=0), self._positions, self.model_id,
                          generating=False)
        engine = self.engine
        if len(rows) == 1 and adapter.strategy.base_cache_prefix(
                shared, reuse=reuse and engine.prefix_cache.enabled):
            # One conversation's check: batched with other conversations' waiting ones.
            logits = await asyncio.to_thread(engine.batcher.run, adapter, list(rows[0]), shared)
        else:
            logits = await asyncio.to_thread(engine.last_logits, adapter, rows, shared,
                                             reuse=reuse)
        return torch.log_softmax(logits, dim=-1)

    def can_mix(self, calls: Sequence[tuple[Adapter, Sequence[int]]], shared: int) -> bool:
        """Whether ``calls`` (adapter, row) can share one mixed-adapter forward
        (``next_token_logprobs_mixed``): aLoRAs on one conversation, prefix cache on."""
        return self.engine.prefix_cache.enabled and mixed_batchable(calls, shared)

    async def next_token_logprobs_mixed(
        self, calls: Sequence[tuple[Adapter, Sequence[int]]], shared: int,
    ) -> torch.Tensor:
        """Next-token log-probabilities after each row with its own aLoRA on, in one forward
        over the conversation's base cache (``adapter_calls.mixed_last_logits``)."""
        check_prompt_fits(max((len(r) for _, r in calls), default=0), self._positions,
                          self.model_id, generating=False)
        logits = await asyncio.to_thread(self.engine.mixed_last_logits, calls, shared)
        return torch.log_softmax(logits, dim=-1)

    async def _adapter_decode(
        self, adapter: Adapter, ids: list[int], shared: int, *, grammar: str | None,
        max_new_tokens: int, reuse: bool,
    ) -> tuple[list[int], list[torch.Tensor]]:
        """``ServingBackend.generate_with_adapter``'s decoding: PEFT's, the grammar as a
        logits processor (``adapter_calls.adapter_generate``)."""
        check_prompt_fits(len(ids), self._positions, self.model_id, generating=True)
        processors = [] if grammar is None else [GrammarLogitsProcessor(
            self.tokenizer, grammar, self.model.get_output_embeddings().weight.shape[0],
            len(ids), fast_forward=True)]
        return await asyncio.to_thread(
            self.engine.adapter_generate, adapter, ids, shared, processors=processors,
            max_new_tokens=max_new_tokens, reuse=reuse,
        )

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
