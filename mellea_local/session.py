"""``start_session()`` / ``MelleaSession``: the peer library's entry point, over our backend.

A session holds a backend and the conversation so far (``ctx``) and offers the verbs users
start from: ``instruct`` (instruct / validate / repair), ``chat``, ``act``, ``validate``, each
with an async twin. ``start_session()`` with no arguments loads the embedded model, so it runs
offline anywhere; requirement checks go through ``avalidate``, so on a backend with a
requirement-check aLoRA each check reuses the conversation's KV cache.

With the default ``SimpleContext`` every call starts fresh, as in the peer library; the
requirements of that call are then judged over the exchange itself (the instruction and the
answer), never over an empty conversation.

Which model answers and judges when none is named (``start_session()``, ``mellea-local
check`` without ``--model``): :func:`default_model`. The real model, SmolLM2-135M-Instruct
with its shipped requirement-check aLoRA, when it is in the model cache; otherwise the
embedded demo model, with one line saying so and how to get the real one. The embedded model
has 3 M parameters: it runs the machinery anywhere, offline, but it is no email writer (asked
for one it wrote "Is it 60?") and no judge of a user's data (0.500 on a new user's 40 checks).
"""

from __future__ import annotations

import copy
import logging
import os
import uuid
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from jinja2 import StrictUndefined, TemplateError, UndefinedError
from jinja2.sandbox import SandboxedEnvironment

from mellea_local.core.backend import REQUIREMENT_CHECK, Backend
from mellea_local.core.component import Span
from mellea_local.core.context import ChatContext, Context, SimpleContext
from mellea_local.core.sync import run_sync
from mellea_local.core.thunk import ComputedModelOutputThunk
from mellea_local.errors import (
    AdapterNotFoundError,
    InputTypeError,
    InvalidInputError,
    UnsupportedInputError,
)
from mellea_local.inputs import check_backend, check_context, requirement_list
from mellea_local.messages import Message
from mellea_local.model_ids import ModelIdentifier
from mellea_local.requirements import Requirement, ValidationResult, avalidate
from mellea_local.sampling import (
    DEFAULT_STRATEGY,
    BaseSamplingStrategy,
    Instruction,
    RejectionSamplingStrategy,
    SamplingAttempt,
    SamplingResult,
    combine_requirements,
)

__all__ = ["MelleaSession", "start_session"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

EMBEDDED_MODEL_ID = "mellea-tiny-chat"
REAL_MODEL = "smollm2-135m"
DEFAULT_MODEL_ENV = "MELLEA_LOCAL_DEFAULT_MODEL"
"""Names the model used when none is given (``embedded`` or any ``--model`` value): set it to
pin the choice, e.g. ``embedded`` in tests that assert the embedded model's answers."""


# Generation defaults of a registered model where greedy decoding alone fails a plain task,
# merged under the caller's model_options. SmolLM2-135M-Instruct, greedy, asked for the peer's
# quick-start email, repeated "I'm sure you're aware of the importance of ..." until the
# budget ended (1,024 tokens, then 2,048); with repetition_penalty 1.2 (still greedy, still
# deterministic) it wrote the email and stopped by itself after 275 tokens (49 s, 1 thread).
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {REAL_MODEL: {"repetition_penalty": 1.2}}


def embedded_note(how_to_choose: str) -> str:
    """The one line said when the embedded demo model judges because no real model is here."""
    return (f"note: the embedded demo model (mellea-tiny-chat, 3 M parameters, demo only) is "
            f"answering and judging, since {REAL_MODEL} is not in the model cache; get the real "
            f"one once with `mellea-local models get {REAL_MODEL}` (93 MB, then it is the "
            f"default), or {how_to_choose}.")


def default_model() -> tuple[str, bool]:
    """The model to use when the caller named none, and whether it is the embedded fallback.

    ``$MELLEA_LOCAL_DEFAULT_MODEL`` when set (taken as named: no fallback note); else
    ``smollm2-135m`` when its converted folder is in the model cache (its load verifies every
    file against the manifest, so a damaged cache is refused there, never replaced by the
    toy); else ``"embedded"``, and ``True`` tells the caller to say so in one line
    (:func:`embedded_note`).
    """
    named = os.environ.get(DEFAULT_MODEL_ENV, "").strip()
    if named:
        return named, False
    from mellea_local.models import model_status  # the registry: no torch

    if model_status(REAL_MODEL) is not None:
        return REAL_MODEL, False
    return "embedded", True
_HF_NAMES = frozenset({"hf", "huggingface", "transformers"})
_EMBEDDED_NAMES = frozenset({None, "embedded", EMBEDDED_MODEL_ID})
# StrictUndefined: a misspelt {{variable}} is an error naming it, not silently empty text.
_TEMPLATES = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True,
                                  undefined=StrictUndefined)


def _run(coro: Coroutine[Any, Any, T], twin: str) -> T:
    return run_sync(coro, in_loop=(
        f"MelleaSession.{twin.lstrip('a')}() cannot run inside a running event loop; use "
        f"`await session.{twin}(...)`."))


def _fill(text: str, user_variables: dict[str, Any] | None) -> str:
    """``{{name}}`` placeholders filled from ``user_variables`` (a sandboxed Jinja render)."""
    if not user_variables:
        return text
    if not isinstance(user_variables, dict) or not all(isinstance(k, str)
                                                       for k in user_variables):
        raise InputTypeError(
            f"user_variables must be a dict of str names to values, got "
            f"{type(user_variables).__name__}; pass e.g. user_variables={{'city': 'Paris'}}.")
    try:
        return _TEMPLATES.from_string(text).render(**user_variables)
    except UndefinedError as exc:
        raise InvalidInputError(
            f"The text {text[:60]!r} uses a variable user_variables does not give ({exc.message}"
            f"); given: {sorted(user_variables)}. Fix the {{{{name}}}} or add the variable."
        ) from None
    except TemplateError as exc:
        raise InvalidInputError(
            f"The text {text[:60]!r} is not a valid {{{{variable}}}} template ({exc}); escape "
            "literal braces as {{ '{{' }} or drop user_variables.") from None


def _check_call(strategy: Any, **flags: Any) -> None:
    """A strategy that is a strategy and flags that are bools: ``"no"`` is truthy, so
    ``return_sampling_results="no"`` returned the whole SamplingResult."""
    if strategy is not None and not isinstance(strategy, BaseSamplingStrategy):
        raise InputTypeError(
            f"strategy must be a sampling strategy (e.g. RejectionSamplingStrategy("
            f"loop_budget=3)) or None, got {type(strategy).__name__} ({strategy!r:.60}).")
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise InputTypeError(f"{name} must be True or False, got {value!r:.60}; pass a bool.")


def _requirements(value: Any) -> list[Any] | None:
    """``requirements=`` as a list: a single str is refused as ``arequirement_checks`` refuses
    it (iterating it made one requirement per character), the peer's type being a list."""
    if value is None:
        return None
    items = requirement_list(value, "requirements", single_ok=False)
    for i, item in enumerate(items):
        if not isinstance(item, str | Requirement):
            raise InputTypeError(
                f"requirements[{i}] is {type(item).__name__} ({repr(item)[:60]}); give a "
                "description (str) or a Requirement, e.g. requirements=['Be brief.'].")
    return items


def _refuse(**unsupported: Any) -> None:
    given = [name for name, value in unsupported.items() if value]
    if given:
        raise UnsupportedInputError(
            f"MelleaSession does not support {', '.join(given)} here (docs/compatibility.md); "
            "put that material into the description or the context instead."
        )


class MelleaSession:
    """A backend plus the conversation so far; every verb updates ``ctx``.

    ``ctx`` defaults to a ``SimpleContext`` (each call starts fresh). A root ``ChatContext``
    without a model is bound to the backend's ``model_id`` (a plain id never truncates the
    history; pass ``token_context_length_limit`` for that).
    """

    def __init__(self, backend: Backend, ctx: Context | None = None) -> None:
        # None, text, numbers and containers are never a backend; other objects are taken as
        # they are (the peer accepts any object here, and its tests pass bare mocks).
        if backend is None or isinstance(backend, str | bytes | int | float | list | tuple
                                         | dict | set):
            check_backend(backend, "MelleaSession backend")  # raises, naming the fix
        self.backend = backend
        if ctx is not None:
            check_context(ctx, "MelleaSession ctx")
        self.ctx: Context = self._bind(ctx if ctx is not None else SimpleContext())
        self.id = str(uuid.uuid4())
        self._last_view: list[Span] | None = None

    def _bind(self, ctx: Context) -> Context:
        if isinstance(ctx, ChatContext) and ctx.is_root_node and ctx.model_id is None:
            model_id = getattr(self.backend, "model_id", None)
            if model_id is not None:
                return ctx._bind_model(model_id)
        return ctx

    # ----- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> MelleaSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        """Forget the conversation (the backend stays loaded: other sessions may share it)."""
        self.reset()

    def reset(self) -> None:
        """An empty conversation with the same configuration (and model binding)."""
        self.ctx = self._bind(self.ctx.new_instance())
        self._last_view = None

    def __copy__(self) -> MelleaSession:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.id = str(uuid.uuid4())
        return clone

    def clone(self) -> MelleaSession:
        """A session sharing the backend and the conversation so far, with its own id."""
        return copy.copy(self)

    def last_prompt(self) -> list[dict[str, Any]] | None:
        """The chat messages the model read for the newest output (None before any call)."""
        if self._last_view is None:
            return None
        from mellea_local.rendering.chat import to_chat_messages, to_message_dicts

        return to_message_dicts(to_chat_messages(self._last_view))

    def _record(self, generation_ctx: Context) -> None:
        view = generation_ctx.view_for_generation() or []
        entries = generation_ctx.as_list() or []
        # What the model read: the view before the output, with the action it answered.
        self._last_view = [*view[:-2], *entries[-2:-1]] if len(entries) >= 2 else list(view)

    # ----- the verbs -------------------------------------------------------------------

    async def aact(
        self,
        action: Span,
        *,
        requirements: Sequence[Requirement | str] | None = None,
        strategy: BaseSamplingStrategy | None = DEFAULT_STRATEGY,
        return_sampling_results: bool = False,
        format: type[Any] | None = None,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
    ) -> ComputedModelOutputThunk[Any] | SamplingResult:
        """Generate the answer to ``action``; with requirements, sample until they hold.

        Returns the finished output, or the whole ``SamplingResult`` when
        ``return_sampling_results``. ``strategy=None`` generates once (requirements, if any,
        are still checked, so the result says whether they hold).
        """
        # A SimpleContext shows the model nothing before the action, exactly like a fresh
        # ChatContext; running on the latter lets the checks see the exchange they judge.
        requirements = _requirements(requirements)
        _check_call(strategy, tool_calls=tool_calls,
                    return_sampling_results=return_sampling_results)
        fresh = not isinstance(self.ctx, ChatContext)
        run_ctx: Context = ChatContext() if fresh else self.ctx
        if tool_calls:
            if requirements:
                raise UnsupportedInputError(
                    "act/instruct with tool_calls=True generates once and cannot check "
                    "requirements; call session.validate(...) on the result instead."
                )
            mot, new_ctx = await self.backend.generate_from_context(
                action, run_ctx, format=format, model_options=model_options, tool_calls=True
            )
            await mot.avalue()
            attempt = SamplingAttempt(0, action, ComputedModelOutputThunk(mot), new_ctx)
            result = SamplingResult(True, 0, [attempt])
        else:
            if strategy is None:
                strategy = RejectionSamplingStrategy(loop_budget=1)
            reqs = combine_requirements(strategy.requirements, requirements)
            result = await strategy.sample(action, run_ctx, self.backend, reqs, format=format,
                                           model_options=model_options)
        chosen = result.chosen
        self._record(chosen.context)
        if fresh:
            self.ctx = self.ctx.add(chosen.action).add(result.result)
        else:
            self.ctx = chosen.context
        return result if return_sampling_results else result.result

    def act(self, action: Span, **kwargs: Any) -> ComputedModelOutputThunk[Any] | SamplingResult:
        """Synchronous ``aact``."""
        return _run(self.aact(action, **kwargs), "aact")

    async def ainstruct(
        self,
        description: str,
        *,
        requirements: Sequence[Requirement | str] | None = None,
        strategy: BaseSamplingStrategy | None = DEFAULT_STRATEGY,
        return_sampling_results: bool = False,
        format: type[Any] | None = None,
        model_options: dict[str, Any] | None = None,
        user_variables: dict[str, Any] | None = None,
        tool_calls: bool = False,
        images: Sequence[Any] | None = None,
        icl_examples: Sequence[Any] | None = None,
        grounding_context: dict[str, Any] | None = None,
        prefix: str | None = None,
        output_prefix: str | None = None,
    ) -> ComputedModelOutputThunk[Any] | SamplingResult:
        """Ask for ``description`` (``{{name}}`` filled from ``user_variables``) and sample
        until ``requirements`` hold; the default strategy is rejection sampling, budget 2."""
        _refuse(images=images, icl_examples=icl_examples, grounding_context=grounding_context,
                prefix=prefix, output_prefix=output_prefix)
        requirements = _requirements(requirements)
        _check_call(strategy, tool_calls=tool_calls,
                    return_sampling_results=return_sampling_results)
        base = strategy.requirements if strategy is not None else []
        reqs = combine_requirements(base, requirements)
        instruction = Instruction(_fill(description, user_variables), reqs)
        return await self.aact(
            instruction, requirements=requirements, strategy=strategy,
            return_sampling_results=return_sampling_results, format=format,
            model_options=model_options, tool_calls=tool_calls,
        )

    def instruct(self, description: str, **kwargs: Any) -> Any:
        """Synchronous ``ainstruct``."""
        return _run(self.ainstruct(description, **kwargs), "ainstruct")

    async def achat(
        self,
        content: str,
        role: str = "user",
        *,
        user_variables: dict[str, Any] | None = None,
        format: type[Any] | None = None,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
        images: Sequence[Any] | None = None,
    ) -> Message:
        """Send one chat turn and return the model's reply as an assistant ``Message``."""
        message = Message(role, _fill(content, user_variables), images=images)  # type: ignore[arg-type]
        mot, new_ctx = await self.backend.generate_from_context(
            message, self.ctx, format=format, model_options=model_options,
            tool_calls=tool_calls,
        )
        await mot.avalue()
        self._record(new_ctx)
        self.ctx = new_ctx
        reply = mot.parsed_repr
        if isinstance(reply, Message):
            return reply
        return Message("assistant", mot.value or "", thinking=mot.thinking,
                       tool_calls=mot.tool_calls)

    def chat(self, content: str, role: str = "user", **kwargs: Any) -> Message:
        """Synchronous ``achat``."""
        return _run(self.achat(content, role, **kwargs), "achat")

    async def avalidate(
        self,
        reqs: Requirement | str | Sequence[Requirement | str],
        *,
        output: Any = None,
        format: type[Any] | None = None,
        model_options: dict[str, Any] | None = None,
        generate_logs: list[Any] | None = None,
        input: Any = None,
        route: bool = True,
    ) -> list[ValidationResult]:
        """Check requirements against the newest output in ``ctx`` (or ``output``).

        ``route`` (default on): what a program can decide exactly is decided by it
        (``avalidate``); ``route=False`` judges everything with the model."""
        ctx = self.ctx
        if not isinstance(ctx, ChatContext):
            history = ctx.as_list() or []
            ctx = ChatContext().with_history(history[-2:])
        if input is not None:
            ctx = ctx.add(input)
        results = await avalidate(reqs, ctx, self.backend, output=output, format=format,
                                  model_options=model_options, route=route)
        if generate_logs is not None:
            generate_logs.extend(r.thunk.generate_log if r.thunk is not None else None
                                 for r in results)
        return results

    def validate(self, reqs: Any, **kwargs: Any) -> list[ValidationResult]:
        """Synchronous ``avalidate``."""
        return _run(self.avalidate(reqs, **kwargs), "avalidate")

    def __repr__(self) -> str:
        return f"MelleaSession({type(self.backend).__name__}, {self.ctx!r})"


def _resolve_context(ctx: Context | None, context_type: str | None) -> Context:
    """``ctx`` as given, else a new context of ``context_type`` (``"simple"`` by default)."""
    if ctx is not None:
        check_context(ctx, "ctx")
    if ctx is not None and context_type is not None:
        raise InvalidInputError("Cannot specify both ctx and context_type; pass one of them.")
    if ctx is not None:
        return ctx
    kinds = {None: SimpleContext, "simple": SimpleContext, "chat": ChatContext}
    if context_type not in kinds:
        raise InvalidInputError(f"context_type must be 'simple' or 'chat', got {context_type!r}.")
    return kinds[context_type]()


def start_session(
    backend_name: str = "hf",
    model_id: str | ModelIdentifier | None = None,
    ctx: Context | None = None,
    *,
    model_options: dict[str, Any] | None = None,
    context_type: str | None = None,
    **backend_kwargs: Any,
) -> MelleaSession:
    """A session over a local Hugging Face model; with no ``model_id``, the default model.

    ``model_id`` is a registered name (``"smollm2-135m"``), a hub id or a local folder
    (``"embedded"`` or ``"mellea-tiny-chat"``: the shipped demo model and its requirement-check
    adapters). Without one, :func:`default_model` picks: SmolLM2-135M-Instruct when it is in
    the model cache, else the embedded demo model with one warning line saying so and how to
    get the real one. For a model other than the embedded one the library's
    ``requirement-check`` adapter is added when one fits it (SmolLM2 has a shipped aLoRA);
    otherwise requirements are judged by the model's yes/no answer. A registered model's
    generation defaults (``MODEL_DEFAULTS``: ``repetition_penalty`` 1.2 for smollm2-135m) go
    under ``model_options``, which override them. ``backend_kwargs`` go to
    ``LocalHFBackend`` (``device``, ``dtype``, ...). ``context_type`` (``"simple"`` or
    ``"chat"``) picks the context when ``ctx`` is not given.
    """
    ctx = _resolve_context(ctx, context_type)
    if backend_name not in _HF_NAMES:
        raise UnsupportedInputError(
            f"backend_name {backend_name!r} is not available in mellea_local, which runs local "
            "Hugging Face models only; use backend_name='hf'."
        )
    from mellea_local.backends.hf import LocalHFBackend  # torch: import on use

    if isinstance(model_id, ModelIdentifier):
        model_id = model_id.hf_model_name
    if model_id is None:
        model_id, fallback = default_model()
        if fallback:
            logger.warning(embedded_note("pass start_session(model_id=...)"))
    if model_id in _EMBEDDED_NAMES:
        backend = LocalHFBackend.embedded(model_options=model_options, **backend_kwargs)
    else:
        defaults = MODEL_DEFAULTS.get(str(model_id))
        if defaults and isinstance(model_options, dict | None):
            model_options = {**defaults, **(model_options or {})}
        backend = LocalHFBackend(str(model_id), model_options=model_options, **backend_kwargs)
        try:
            backend.add_adapter(REQUIREMENT_CHECK)
        except AdapterNotFoundError:
            logger.info("No requirement-check adapter for %s: requirements are judged by the "
                        "model's yes/no answer.", model_id)
    return MelleaSession(backend, ctx)
