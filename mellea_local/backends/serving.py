"""The generation lifecycle, written once for every engine that renders with our tokenizer.

Why: a backend's ``generate_from_context`` is the same eight steps whatever produces the tokens
(check the format, merge the options, render, build the grammar, start the thunk, produce,
finish the thunk from the ids, cancel on request); only "produce" differs between engines. As
httpx's ``BaseClient`` holds what ``Client`` and ``AsyncClient`` share and each differs only
at the transport, :class:`ServingBackend` holds the lifecycle and an engine implements
:meth:`ServingBackend._start_producing`: given a :class:`ServingRequest`, start producing
token ids (on a worker thread, or as an event-loop task) and hand the outcome to the
:class:`Delivery`, which feeds the thunk.

An engine adopts it by deriving from ``ServingBackend`` (after ``RequirementScoring``), setting
``provider``, ``model_id``, ``model_options``, ``_positions`` and a ``tokenizer`` property, and
implementing ``_start_producing``; ``render`` and ``generate_from_context`` come with it.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mellea_local.backends.constrained import json_schema_grammar
from mellea_local.backends.finish import GenerationOutput, finish_thunk, prompt_opens_thinking
from mellea_local.core.backend import Backend
from mellea_local.core.component import Span
from mellea_local.core.context import Context
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.inputs import check_format
from mellea_local.options import ModelOption, merge_options
from mellea_local.parsing.tool_grammar import constrain_tool_calls, tool_call_grammar
from mellea_local.rendering.request import render_request

__all__ = ["Delivery", "ServingBackend", "ServingRequest"]


@dataclass
class ServingRequest:
    """One generation as an engine sees it: the rendered prompt and what it must honour."""

    prompt_ids: list[int]
    gen_kwargs: dict[str, Any]
    """``generate()`` keyword arguments from the options (max_new_tokens, sampling, stops)."""
    grammar: str | None = None
    """The grammar the output is held to (``format=``'s JSON schema), or None."""
    seed: int | None = None
    on_text: Callable[[str], None] | None = None
    """Receives each new piece of text when streaming; None when not."""
    cancel: threading.Event = field(default_factory=threading.Event)
    """Set when the consumer cancels: stop at the next token."""
    meta: dict[str, Any] = field(default_factory=dict)
    """What the engine reports beside the ids (timings, cache counts): copied to
    ``thunk.meta`` when the thunk is finished."""

    @property
    def stop_strings(self) -> list[str]:
        return list(self.gen_kwargs.get("stop_strings") or [])


class Delivery:
    """Feeds one thunk from an engine's producer, on whichever thread or task it runs."""

    def __init__(self, mot: ModelOutputThunk[Any]) -> None:
        self._mot = mot
        self.output: GenerationOutput | None = None

    def run(self, produce: Callable[[], GenerationOutput]) -> None:
        """Produce on this thread (an engine's worker) and hand the outcome to the thunk."""
        try:
            self.output = produce()
        except BaseException as exc:
            self._mot._push_error(exc)
        else:
            self._mot._push_done()

    async def arun(self, produce: Awaitable[GenerationOutput]) -> None:
        """Await ``produce`` (an engine's task) and hand the outcome to the thunk."""
        try:
            self.output = await produce
        except BaseException as exc:
            self._mot._push_error(exc)
        else:
            self._mot._push_done()


class ServingBackend(Backend):
    """``generate_from_context`` for an engine that supplies only how tokens are produced."""

    provider: ClassVar[str]
    """Written to ``thunk.generation.provider`` (``"huggingface"``, ``"llama.cpp"``)."""
    model_id: str
    model_options: dict[str, Any]
    _positions: Any
    """The engine's position limit, as ``rendering.prompt.position_limit`` gives it."""

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
        if grammar is None and tool_calls and tools and constrain_tool_calls(
                opts, self.tokenizer):
            # One call to an offered tool with valid arguments (parsing.tool_grammar).
            mode = ("open" if thinking_started else
                    "none" if opts.get(ModelOption.THINKING) is False else "optional")
            choice = opts.get(ModelOption.TOOL_CHOICE)
            grammar = tool_call_grammar(
                [spec for name, (_, spec) in tools.items() if choice in (None, name)]
                or [spec for _, spec in tools.values()],
                tokenizer=self.tokenizer, thinking=mode)
        request = ServingRequest(
            prompt_ids=ids,
            gen_kwargs=gen_kwargs,
            grammar=grammar,
            seed=opts.get(ModelOption.SEED),
            on_text=mot._push_delta if opts.get(ModelOption.STREAM) else None,
        )
        if grammar is not None and format is None:
            request.meta["tool_grammar"] = True
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

        mot._start_generation(action=action, cancel_hook=request.cancel.set,
                              post_process=post_process)
        self._start_producing(request, delivery)
        return mot, ctx.add(action).add(mot)

    @abstractmethod
    def _start_producing(self, request: ServingRequest, delivery: Delivery) -> None:
        """Start producing ``request``'s token ids without waiting for them; hand the outcome
        to ``delivery`` (``delivery.run`` on a worker thread, ``delivery.arun`` in a task)."""
