"""The generation lifecycle, written once for every engine that renders with our tokenizer.

Why: a backend's ``generate_from_context`` is the same eight steps whatever produces the tokens
(check the format, merge the options, render, build the grammar, start the thunk, produce,
finish the thunk from the ids, cancel on request); only "produce" differs between engines. As
httpx's ``Client`` holds everything but the network and its ``Transport`` has one method,
:class:`ServingBackend` holds the lifecycle and its engine has one generation method,
:meth:`ServingEngine.produce`: given a :class:`ServingRequest`, the new token ids as a
:class:`GenerationOutput` (awaited in a task the backend starts; an engine that computes on a
thread wraps the thread). :meth:`ServingEngine.check_request` refuses, before any task starts,
a request the engine can already tell it cannot serve (a prompt too long for its context).

What does not depend on how tokens are made is written here once, for every engine:

- **adapter admission** (:meth:`ServingBackend.admit_adapter`): name check, ``io.yaml``
  ``check_supported()``, the already-loaded and name-clash rules, base and tokenizer fit, then
  ``engine.load_adapter`` (the one step that differs), then the registry record. Both
  ``LocalHFBackend.add_adapter`` and the adapters a llama-server serves go through it, so an
  io.yaml one backend refuses the other refuses too;
- the adapter lookups (``adapters``, ``adapter_for``, ``supports_intrinsic``) and the scoring
  entry point (``score_requirements``, ``RequirementScoring`` over the intrinsics layer);
- the generation lifecycle (``render``, ``generate_from_context`` around
  ``await engine.produce(request)``).

An engine is the small protocol :class:`ServingEngine`: it declares its capabilities
(``mixed_adapters``), loads an admitted adapter (``load_adapter``; the duty only it can
keep, refusing an aLoRA whose invocation is absent from the tokens it is fed, stays in its
adapter calls) and produces a generation (``check_request``, ``produce``).
``backend.engine`` is the public handle on every backend.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from mellea_local.adapters import (
    AdapterSource,
    ResolvedAdapter,
    find_in_library,
    resolve_adapter,
)
from mellea_local.adapters.catalog import require_intrinsic_name
from mellea_local.adapters.loaded import Adapter
from mellea_local.adapters.transformations import TokenLogprob
from mellea_local.backends.adapter_registry import (
    LoadedAdapters,
    check_adapter_name,
    check_base_fit,
    check_tokenizer_fit,
    describe,
    intrinsic_of,
)
from mellea_local.backends.constrained import (
    compact_json_grammar,
    json_schema_grammar,
    token_logprobs,
)
from mellea_local.backends.finish import GenerationOutput, finish_thunk, prompt_opens_thinking
from mellea_local.core.backend import AGENT, Backend
from mellea_local.core.component import Span
from mellea_local.core.context import Context
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import AdapterError
from mellea_local.inputs import check_format
from mellea_local.intrinsics.requirement_check import RequirementScoring
from mellea_local.options import ModelOption, merge_options
from mellea_local.parsing.tool_grammar import (
    closing_reserve,
    constrain_tool_calls,
    tool_call_grammar,
)
from mellea_local.rendering.request import render_request

__all__ = ["Delivery", "ServingBackend", "ServingEngine", "ServingRequest"]

_producing: set[asyncio.Task[None]] = set()
"""The tasks awaiting an engine's ``produce``: the event loop holds tasks weakly."""


@runtime_checkable
class ServingEngine(Protocol):
    """What a backend needs from its engine (structural): capabilities, adapters, generation.

    ``mixed_adapters``: whether one forward can score rows with different adapters on
    (``next_token_logprobs_mixed``); the intrinsics layer reads this declaration instead of
    probing for methods. ``agent_steps``: whether ``produce`` can decode a tool-calling step
    with an agent adapter on (``ServingRequest.adapter``); a backend over an engine that
    cannot never looks one up. ``load_adapter`` makes an admitted adapter usable under ``name`` or
    raises ``AdapterError`` leaving the engine unchanged; ``unload_adapter`` undoes it.
    ``check_request`` raises a typed error for a request the engine cannot serve, before the
    thunk is started (so the caller of ``generate_from_context`` sees it, not the thunk);
    ``produce`` generates ``request.prompt_ids``'s continuation honouring ``gen_kwargs``,
    ``grammar``, ``seed``, ``on_text`` and ``cancel``, putting what ``thunk.meta`` should show
    in ``request.meta``.
    """

    mixed_adapters: bool
    agent_steps: bool

    def load_adapter(self, resolved: ResolvedAdapter, name: str) -> None: ...

    def unload_adapter(self, name: str) -> None: ...

    def check_request(self, request: ServingRequest) -> None: ...

    async def produce(self, request: ServingRequest) -> GenerationOutput: ...


@dataclass
class ServingRequest:
    """One generation as an engine sees it: the rendered prompt and what it must honour."""

    prompt_ids: list[int]
    gen_kwargs: dict[str, Any]
    """``generate()`` keyword arguments from the options (max_new_tokens, sampling, stops)."""
    grammar: str | None = None
    """The grammar the output is held to (``format=``'s JSON schema), or None."""
    closing_reserve: tuple[int, int] | None = None
    """With a tool-call grammar: the tokens before ``max_new_tokens`` from which the decoder
    only closes the call (``closing_reserve``); None: no closing mode."""
    seed: int | None = None
    on_text: Callable[[str], None] | None = None
    """Receives each new piece of text when streaming; None when not."""
    cancel: threading.Event = field(default_factory=threading.Event)
    """Set when the consumer cancels: stop at the next token."""
    meta: dict[str, Any] = field(default_factory=dict)
    """What the engine reports beside the ids (timings, cache counts): copied to
    ``thunk.meta`` when the thunk is finished."""
    adapter: Adapter | None = None
    """An agent adapter the step is decoded with (``ServingBackend.agent_adapter``): active
    from its invocation on, every token before it the base model's; None: the base model.
    Set only when the engine declares ``agent_steps``."""

    @property
    def stop_strings(self) -> list[str]:
        return list(self.gen_kwargs.get("stop_strings") or [])


class Delivery:
    """Feeds one thunk from the task awaiting its engine's ``produce``."""

    def __init__(self, mot: ModelOutputThunk[Any]) -> None:
        self._mot = mot
        self.output: GenerationOutput | None = None

    async def arun(self, produce: Awaitable[GenerationOutput]) -> None:
        """Await ``produce`` (an engine's task) and hand the outcome to the thunk."""
        try:
            self.output = await produce
        except BaseException as exc:
            self._mot._push_error(exc)
        else:
            self._mot._push_done()


class ServingBackend(RequirementScoring, Backend):
    """A backend over an engine: adapters, scoring and generation written once; the engine
    supplies only how tokens are produced (``engine.produce``) and how an adapter loads."""

    provider: ClassVar[str]
    """Written to ``thunk.generation.provider`` (``"huggingface"``, ``"llama.cpp"``)."""
    model_id: str
    model_options: dict[str, Any]
    engine: ServingEngine
    """The public handle on what computes (model and cache, or the server fleet)."""
    _positions: Any
    """The engine's position limit, as ``rendering.prompt.position_limit`` gives it."""
    _registry: LoadedAdapters
    _base_identity: str | None = None
    """The base model adapters are checked against (``check_base_fit``); None: unchecked."""
    _agent_looked_up: bool = False

    # ----- adapters (admission written once) ----------------------------------------------

    @property
    def adapters(self) -> dict[str, Adapter]:
        """Loaded adapters by name (a copy)."""
        return dict(self._registry.adapters)

    def adapter_for(self, intrinsic: str, *, name: str | None = None) -> Adapter:
        """The adapter serving ``intrinsic``: the one named, else an aLoRA, else a LoRA."""
        return self._registry.adapter_for(intrinsic, name=name)

    def supports_intrinsic(self, name: str) -> bool:
        return self._registry.serves(name)

    @property
    def mixed_adapters(self) -> bool:
        """The engine's declared capability: several adapters in one forward."""
        return bool(self.engine.mixed_adapters)

    def admit_adapter(
        self, resolved: ResolvedAdapter, *, name: str | None = None, source: Any = None,
        allow_other_base: bool = False,
    ) -> Adapter:
        """The one admission path: every rule an adapter must pass, then the engine's load,
        then the registry record. All or nothing: a refusal leaves the backend as it was.

        Rules, in order: a usable ``name``; the io.yaml asks only for what is applied
        (``check_supported``); the same unchanged folder already loaded is a no-op (with a
        warning); a name held by another folder is refused; the adapter was trained on this
        base (unless ``allow_other_base``) and its invocation means the same to our tokenizer.
        """
        name = check_adapter_name(name)
        resolved.io_config.check_supported()
        same = self._registry.loaded_from(resolved)
        if same is not None and name in (None, same.name) and (
                same.intrinsic == intrinsic_of(resolved)):
            return self._registry.note_loaded_again(same, source)
        name = name or f"{intrinsic_of(resolved) or resolved.path.name}_{resolved.kind.value}"
        self._registry.refuse_clash(name, source if source is not None else resolved.path,
                                    resolved)
        if not allow_other_base:
            check_base_fit(resolved, self._base_identity)
        check_tokenizer_fit(resolved, self.tokenizer)
        self.engine.load_adapter(resolved, name)
        return self._registry.add(describe(resolved, name, self.tokenizer), resolved)

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
        (``<intrinsic>/<base>/<alora|lora>/``). Then the rules of :meth:`admit_adapter`: it
        must fit this model and tokenizer, be trained on it (``allow_other_base=True``
        accepts an adapter whose config names another base, for a copy or fine-tune of it),
        and its io.yaml must use only features this package implements
        (``check_supported``); an engine that serves a fixed set (llama-server) accepts only
        those.

        Adding is all or nothing: a refused or failed load leaves the backend exactly as it
        was. Adding a folder that is already loaded is a no-op that logs a warning saying so
        and returns the loaded ``Adapter``; a name already taken by another folder is an error.
        """
        name = check_adapter_name(name)
        resolved = resolve_adapter(source, base_model=self.model_id, roots=roots)
        if intrinsic is not None:
            resolved = dataclasses.replace(resolved, intrinsic=require_intrinsic_name(intrinsic))
        return self.admit_adapter(resolved, name=name, source=source,
                                  allow_other_base=allow_other_base)

    def unload_adapter(self, name: str) -> None:
        """Remove a loaded adapter; the name (and what the engine held for it) is free again."""
        from mellea_local.errors import AdapterNotFoundError

        if name not in self._registry.adapters:
            raise AdapterNotFoundError(
                f"No adapter named {name!r} is loaded (loaded: {sorted(self._registry.adapters)})"
                "; nothing to unload."
            )
        self.engine.unload_adapter(name)
        self._registry.remove(name)

    def agent_adapter(self, model_options: Mapping[str, Any] | None = None) -> Adapter | None:
        """The adapter a tool-calling step is decoded with under ``model_options``, or None.

        ``ModelOption.AGENT_ADAPTER``: False, none; a str, the loaded adapter of that name;
        unset or True, the agent adapter already loaded (``add_adapter("agent")`` or a folder
        with ``intrinsic="agent"``), else the shipped one for this model: the library's
        ``agent/<base>/alora/`` (``core.backend.AGENT``), looked up once, on first use, and
        admitted like any adapter (``admit_adapter``). Only an aLoRA is looked up: every
        token before its invocation (the template's assistant header) is the base model's,
        so the agent's steps and later requirement checks share one base-model KV cache.
        """
        value = merge_options(self.model_options, model_options).get(ModelOption.AGENT_ADAPTER)
        if value is False:
            return None
        if isinstance(value, str):
            if not self.engine.agent_steps:
                raise AdapterError(
                    f"{type(self).__name__} cannot decode a step with an adapter on "
                    f"(ModelOption.AGENT_ADAPTER={value!r}); use LocalHFBackend, or leave the "
                    "option unset.")
            return self._registry.adapter_for(AGENT, name=value)
        if not self.engine.agent_steps:
            return None
        if not self._registry.serves(AGENT) and not self._agent_looked_up:
            self._agent_looked_up = True
            found = find_in_library(AGENT, self.model_id, kinds=("alora",))
            if found is not None:
                self.admit_adapter(found, name=AGENT)
        return self._registry.adapter_for(AGENT) if self._registry.serves(AGENT) else None

    # ----- generation ----------------------------------------------------------------------

    @property
    @abstractmethod
    def tokenizer(self) -> Any:
        """The tokenizer prompts are rendered with and output is decoded with."""

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
        mot: ModelOutputThunk[Any] = ModelOutputThunk(None)
        thinking_started = prompt_opens_thinking(self.tokenizer, ids)
        grammar = json_schema_grammar(format.model_json_schema()) if format else None
        reserve: tuple[int, int] | None = None
        if grammar is None and tool_calls and tools and constrain_tool_calls(
                opts, self.tokenizer):
            # One call to an offered tool with valid arguments (parsing.tool_grammar).
            mode = ("open" if thinking_started else
                    "none" if opts.get(ModelOption.THINKING) is False else "optional")
            choice = opts.get(ModelOption.TOOL_CHOICE)
            offered = ([spec for name, (_, spec) in tools.items() if choice in (None, name)]
                       or [spec for _, spec in tools.values()])
            grammar = tool_call_grammar(offered, tokenizer=self.tokenizer, thinking=mode)
            reserve = closing_reserve(offered, self.tokenizer)
        request = ServingRequest(
            prompt_ids=ids,
            gen_kwargs=gen_kwargs,
            grammar=grammar,
            closing_reserve=reserve,
            seed=opts.get(ModelOption.SEED),
            on_text=mot._push_delta if opts.get(ModelOption.STREAM) else None,
        )
        if grammar is not None and format is None:
            request.meta["tool_grammar"] = True
        if tool_calls and tools and format is None:
            request.adapter = self.agent_adapter(model_options)
            if request.adapter is not None:
                request.meta["agent_adapter"] = request.adapter.name
        delivery = Delivery(mot)

        def post_process(out: ModelOutputThunk[Any]) -> None:
            assert delivery.output is not None  # post_process runs only after _push_done
            out.meta.update(request.meta)
            finish_thunk(
                out, delivery.output, tokenizer=self.tokenizer, provider=self.provider,
                model_id=self.model_id, streaming=request.on_text is not None,
                stop_strings=request.stop_strings, tools=tools, format=format,
                thinking_started=thinking_started, request_tools=tool_calls,
            )

        self.engine.check_request(request)  # refused here, before a task starts
        mot._start_generation(action=action, cancel_hook=request.cancel.set,
                              post_process=post_process)
        task = asyncio.get_running_loop().create_task(
            delivery.arun(self.engine.produce(request)))
        _producing.add(task)  # a reference until it finishes (the loop keeps weak ones)
        task.add_done_callback(_producing.discard)
        return mot, ctx.add(action).add(mot)

    async def generate_with_adapter(
        self, adapter: Adapter, ids: Sequence[int], shared: int, *,
        json_schema: Mapping[str, Any] | None, max_new_tokens: int, top_logprobs: int,
        reuse: bool = True,
    ) -> list[TokenLogprob]:
        """Greedy generation with ``adapter`` on, held to ``json_schema`` by our compact-JSON
        grammar (one grammar on every engine, so their outputs agree), with the top-k
        log-probabilities after the mask; the engine decodes (``_adapter_decode``)."""
        grammar = compact_json_grammar(json_schema) if json_schema is not None else None
        new_ids, scores = await self._adapter_decode(
            adapter, list(ids), shared, grammar=grammar, max_new_tokens=max_new_tokens,
            reuse=reuse)
        return token_logprobs(self.tokenizer, new_ids, scores, top_logprobs)

    @abstractmethod
    async def _adapter_decode(
        self, adapter: Adapter, ids: list[int], shared: int, *, grammar: str | None,
        max_new_tokens: int, reuse: bool,
    ) -> tuple[list[int], list[Any]]:
        """Greedy decoding after ``ids`` with ``adapter`` on, under ``grammar`` (None: free),
        the tokens it forces fast-forwarded; the new ids and each step's scores after the
        mask (what ``token_logprobs`` reads)."""
