"""The public generic call: ``intrinsic(backend, name, context, **variables) -> dict``.

Top to bottom: pick the adapter serving ``name`` on the runner, bind its io.yaml into an
``Intrinsic``, validate the options, build one prompt per call in token space, then score them
all in one batch (fast path) or one by one (general path). The result is the io.yaml's output
shape, with numbers as numbers (requirement-check: ``{"requirement_check": {"score": p}}``).
"""

from __future__ import annotations

import weakref
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from mellea_local.adapters import Adapter, AdapterRunner
from mellea_local.adapters.runner import mixes_adapters
from mellea_local.core import sync
from mellea_local.core.context import Context
from mellea_local.core.sync import sync_twin
from mellea_local.errors import InputTypeError, NotAnAdapterRunnerError
from mellea_local.inputs import check_context
from mellea_local.intrinsics.intrinsic import Intrinsic
from mellea_local.intrinsics.options import scoring_options
from mellea_local.intrinsics.prompt import build_request
from mellea_local.intrinsics.scoring import (
    category_tokens,
    fast_path_for,
    results_from_logprobs,
    score_fast,
    score_general,
)

T = TypeVar("T")
P = ParamSpec("P")

_RUNNER_TYPES: weakref.WeakSet[type] = weakref.WeakSet()
"""Classes whose instances passed ``as_runner`` with the methods defined on the class."""
_RUNNER_MEMBERS = ("tokenizer", "adapter_for", "next_token_logprobs", "generate_with_adapter")


def as_runner(backend: Any) -> AdapterRunner:
    """``backend`` when it implements ``AdapterRunner``; a typed error naming it otherwise."""
    if type(backend) in _RUNNER_TYPES:  # a runtime Protocol check costs ~60 us a call
        return backend  # type: ignore[no-any-return]
    if not isinstance(backend, AdapterRunner):
        raise NotAnAdapterRunnerError(
            f"{type(backend).__name__} cannot run intrinsics: it does not implement "
            "mellea_local.adapters.AdapterRunner (tokenizer, adapter_for, next_token_logprobs, "
            "generate_with_adapter). Use LocalHFBackend or another adapter runner."
        )
    if all(hasattr(type(backend), m) for m in _RUNNER_MEMBERS):  # a class-level runner
        _RUNNER_TYPES.add(type(backend))
    return backend


async def aintrinsic_batch(
    backend: AdapterRunner,
    name: str,
    context: Context,
    calls: Sequence[Mapping[str, Any]],
    *,
    adapter: str | Adapter | None = None,
    model_options: Mapping[str, Any] | None = None,
    reuse: bool = True,
    fast: bool = True,
) -> list[Any]:
    """Results of several calls of one intrinsic over one conversation, batched.

    ``calls`` holds each call's variables; ``adapter`` is a loaded adapter's name or record.
    ``reuse`` and ``fast`` exist for benchmarks and
    exactness tests: turning them off gives the slow paths the fast one must agree with.
    """
    runner = as_runner(backend)
    check_context(context)
    if not isinstance(name, str):
        raise InputTypeError(
            f"name must be an intrinsic's name (str, e.g. 'requirement-check'), got "
            f"{type(name).__name__} ({name!r})."
        )
    chosen = adapter if isinstance(adapter, Adapter) else runner.adapter_for(name, name=adapter)
    intrinsic = Intrinsic.for_adapter(chosen)
    tokenizer = runner.tokenizer
    options = scoring_options(model_options, getattr(tokenizer, "chat_template", None),
                              defaults=intrinsic.config.parameters)
    if not calls:
        return []
    prompts, marked = build_request(tokenizer, intrinsic, chosen, context, calls, options)
    spec = fast_path_for(runner, intrinsic) if fast else None
    if spec is not None:
        return await score_fast(runner, intrinsic, chosen, spec, prompts, options, reuse=reuse)
    return [await score_general(runner, intrinsic, chosen, p, options, reuse=reuse,
                                marked=marked)
            for p in prompts]


async def aintrinsics_on_turn(
    backend: AdapterRunner,
    context: Context,
    calls: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    model_options: Mapping[str, Any] | None = None,
    reuse: bool = True,
    fast: bool = True,
) -> list[Any]:
    """Several intrinsics on one conversation (``(name, variables)`` each), results in order.

    Where the runner declares it can (``mixed_adapters``; ``LocalHFBackend``: aLoRA adapters on
    the fast path, KV reuse on),
    the calls of *different* intrinsics run as one forward: the conversation's base cache is
    shared by all of them and each row gets its own adapter (PEFT's mixed-adapter batching).
    The rest run one intrinsic at a time, as ``aintrinsic_batch`` does. Equal to one at a time
    (tested within 1e-4).
    """
    runner = as_runner(backend)
    check_context(context)
    for item in calls:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], Mapping)):
            raise InputTypeError(
                f"calls must hold (intrinsic name, variables) pairs, e.g. ('requirement-check', "
                f"{{'requirement': '...'}}); got {item!r}."
            )
    tokenizer = runner.tokenizer
    prepared = []
    for name, variables in calls:
        chosen = runner.adapter_for(name)
        intrinsic = Intrinsic.for_adapter(chosen)
        options = scoring_options(model_options, getattr(tokenizer, "chat_template", None),
                                  defaults=intrinsic.config.parameters)
        [prompt], marked = build_request(tokenizer, intrinsic, chosen, context, [variables],
                                         options)
        spec = fast_path_for(runner, intrinsic) if fast else None
        prepared.append((intrinsic, chosen, spec, prompt, options, marked))
    results: list[Any] = [None] * len(prepared)
    fast_ones = [i for i, (_, _, spec, *_) in enumerate(prepared) if spec is not None]
    mixed = []
    if reuse and len(fast_ones) > 1 and mixes_adapters(runner):
        mixer: Any = runner  # declared: it has can_mix and next_token_logprobs_mixed
        rows = [(prepared[i][1], prepared[i][3].ids
                 + category_tokens(tokenizer, prepared[i][2]).forced) for i in fast_ones]
        shared = min(prepared[i][3].shared for i in fast_ones)
        if mixer.can_mix(rows, shared):
            mixed = fast_ones
            logprobs = await mixer.next_token_logprobs_mixed(rows, shared)
            for row, i in enumerate(fast_ones):
                intrinsic, _, spec, _, options, _ = prepared[i]
                [results[i]] = results_from_logprobs(runner, intrinsic, spec,
                                                     logprobs[row : row + 1], options)
    for i, (intrinsic, chosen, spec, prompt, options, marked) in enumerate(prepared):
        if i in mixed:
            continue
        if spec is not None:
            [results[i]] = await score_fast(runner, intrinsic, chosen, spec, [prompt], options,
                                            reuse=reuse)
        else:
            results[i] = await score_general(runner, intrinsic, chosen, prompt, options,
                                             reuse=reuse, marked=marked)
    return results


async def aintrinsic(
    backend: AdapterRunner,
    name: str,
    context: Context,
    *,
    adapter: str | None = None,
    model_options: Mapping[str, Any] | None = None,
    **variables: Any,
) -> Any:
    """Run intrinsic ``name`` on ``context``; the result has the io.yaml's output shape.

    ``variables`` fill the ``{names}`` of the io.yaml instruction (``requirement=...`` for
    requirement-check); a missing or unknown one is an ``IntrinsicVariableError``. ``adapter``
    picks a loaded adapter by name (default: the preferred one serving ``name``).
    """
    [result] = await aintrinsic_batch(backend, name, context, [variables], adapter=adapter,
                                      model_options=model_options)
    return result


def run_sync(coro: Coroutine[Any, Any, T], twin: str) -> T:
    """The intrinsic helpers' synchronous forms, over the one bridge (``core.sync``): inside a
    running event loop they refuse, naming the async twin to await."""
    return sync.run_sync(coro, in_loop=(
        f"This is the synchronous form; inside a running event loop, await {twin} instead."))


intrinsic = sync_twin(aintrinsic)
intrinsics_on_turn = sync_twin(aintrinsics_on_turn)
