"""ModelOutputThunk: a model output that may still be arriving.

A backend creates an empty thunk, calls ``_start_generation`` on the event-loop thread and
then feeds it from any thread with ``_push_delta`` / ``_push_done`` / ``_push_error``. The
consumer drives it with ``astream()`` (new text since the last call) or ``avalue()`` (the
whole output). Finishing happens on the consumer side, in this order: the deltas are joined
into ``value``, the backend's ``post_process(mot)`` runs (it may rewrite ``value``,
``thinking``, ``tool_calls``, ``usage``, ``finish_reason``), the thunk is marked computed, and
``parsed_repr`` is filled from the action (``action._parse(mot)`` for a Component, else
``value``).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import time
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any, Generic, TypeVar

from mellea_local.core.component import Component, parse
from mellea_local.core.generation import GenerateLog, GenerationMetadata, RawProviderResponse
from mellea_local.core.tool_call import ModelToolCall
from mellea_local.errors import (
    InputTypeError,
    InvalidInputError,
    InvalidStateError,
    ThunkStateError,
)

S = TypeVar("S")

# Queue items besides plain delta strings.
_DONE = object()
_CANCELLED = object()


class _Failure:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


class _Completed:
    """An already-finished awaitable: lets ``await mot.cancel_generation()`` work too."""

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())


# Per-generation machinery: never copied, dropped once the generation ends.
_GENERATION_FIELDS = (
    "_loop",
    "_queue",
    "_cancel_hook",
    "_post_process",
    "_deltas",
    "_iterating",
    "_started_at",
)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class ModelOutputThunk(Generic[S]):
    """The output of one generation; computed when built with a value.

    Fields: ``value`` (text), ``parsed_repr`` (what the action parsed it into), ``thinking``,
    ``tool_calls`` (a list of ``ModelToolCall`` in the order the model wrote them, or None),
    ``generation`` (``GenerationMetadata``: usage, model, provider, time to first token, finish
    reasons; ``usage`` and ``finish_reason`` read and write it), ``raw`` (the provider's
    payload), ``generate_log`` and ``meta`` (free-form, for backends and logs).
    """

    def __init__(
        self,
        value: str | None = None,
        meta: dict[str, Any] | None = None,
        parsed_repr: S | None = None,
        tool_calls: list[ModelToolCall] | None = None,
        *,
        thinking: str | None = None,
        usage: dict[str, int] | None = None,
        finish_reason: str | None = None,
    ):
        if value is not None and not isinstance(value, str):
            raise InputTypeError(
                f"ModelOutputThunk value must be a str or None, got {type(value).__name__}; "
                "put structured results in parsed_repr."
            )
        self._underlying_value = value
        self._meta: dict[str, Any] = {} if meta is None else meta
        self.parsed_repr = parsed_repr
        self.tool_calls = tool_calls
        self.thinking = thinking
        self.generation = GenerationMetadata()
        self.raw = RawProviderResponse()
        self._generate_log: GenerateLog | None = None
        self.usage = usage
        self.finish_reason = finish_reason
        self._computed = value is not None
        self._cancelled = False
        self._error: BaseException | None = None
        self._action: Any = None
        self._clear_generation()

    def _clear_generation(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Any] | None = None
        self._cancel_hook: Callable[[], Any] | None = None
        self._post_process: Callable[[ModelOutputThunk[S]], Any] | None = None
        self._deltas: list[str] = []
        self._iterating = False
        self._started_at: float | None = None

    # ----- plain accessors -------------------------------------------------------------

    @property
    def value(self) -> str | None:
        """The output text; None until computed."""
        return self._underlying_value

    @value.setter
    def value(self, v: str | None) -> None:
        if v is not None and not isinstance(v, str):
            raise InputTypeError(
                f"ModelOutputThunk value must be a str or None, got {type(v).__name__}."
            )
        self._underlying_value = v

    @property
    def meta(self) -> dict[str, Any]:
        return self._meta

    @property
    def tool_calls(self) -> list[ModelToolCall] | None:
        """The calls the model asked for, in its order; None when it asked for none."""
        return self._tool_calls

    @tool_calls.setter
    def tool_calls(self, calls: list[ModelToolCall] | None) -> None:
        if isinstance(calls, dict):
            raise InputTypeError(
                "ModelOutputThunk.tool_calls is a list of ModelToolCall (call order kept, a "
                "tool may be called twice); pass list(calls.values()) instead of a dict."
            )
        if calls is not None:
            calls = list(calls)
            bad = next((c for c in calls if not isinstance(c, ModelToolCall)), None)
            if bad is not None:
                raise InputTypeError(
                    f"ModelOutputThunk.tool_calls holds ModelToolCall objects, got "
                    f"{type(bad).__name__}; build one with ModelToolCall(name, func, args)."
                )
        self._tool_calls = calls

    @property
    def usage(self) -> dict[str, Any] | None:
        """Token counts (``prompt_tokens``, ``completion_tokens``, ``total_tokens``)."""
        return self.generation.usage

    @usage.setter
    def usage(self, usage: dict[str, Any] | None) -> None:
        self.generation.usage = usage

    @property
    def finish_reason(self) -> str | None:
        """Why the generation stopped: ``stop``, ``length`` or ``tool_calls`` (None if unknown)."""
        reasons = self.generation.finish_reasons
        return reasons[0] if reasons else None

    @finish_reason.setter
    def finish_reason(self, reason: str | None) -> None:
        self.generation.finish_reasons = None if reason is None else [reason]

    @property
    def truncated(self) -> bool:
        """True when the generation stopped at its token budget (``finish_reason ==
        "length"``), so ``value`` is an answer cut off, not a complete one.

        Why a property: a cut answer reads like a finished one ("Dear Olivia, I hope this
        email"); a validation of it says so in every verdict's reason, and sampling results
        carry the mark. Raise ``ModelOption.MAX_NEW_TOKENS`` to let it finish.
        """
        return self.finish_reason == "length"

    @property
    def generate_log(self) -> GenerateLog | None:
        """The log entry of the call that produced this output (by reference)."""
        return self._generate_log

    def _copy_from(self, other: ModelOutputThunk[Any]) -> None:
        """Take over ``other``'s output in place, for callers that already hold ``self``."""
        self._underlying_value = other._underlying_value
        self._meta = other._meta
        self.parsed_repr = other.parsed_repr
        self.tool_calls = other.tool_calls
        self.thinking = other.thinking
        self.generation = other.generation
        self.raw = other.raw
        self._generate_log = other._generate_log
        self._cancelled = other._cancelled
        self._error = other._error
        self._cancel_hook = None

    @property
    def action(self) -> Any:
        """The action this output answers (set by ``_start_generation``)."""
        return self._action

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def error(self) -> BaseException | None:
        """The exception that ended the generation, if one did."""
        return self._error

    def is_computed(self) -> bool:
        return self._computed

    def __str__(self) -> str:
        return self._underlying_value or ""

    def __repr__(self) -> str:
        state = "computed" if self._computed else "pending"
        return f"{type(self).__name__}({self._underlying_value!r}, {state})"

    # ----- producer side (backends) ----------------------------------------------------

    def _start_generation(
        self,
        *,
        action: Any,
        cancel_hook: Callable[[], Any] | None = None,
        post_process: Callable[[ModelOutputThunk[S]], Any] | None = None,
    ) -> None:
        """Arm the thunk for streaming; must run on the event-loop thread of the consumer."""
        loop = asyncio.get_running_loop()  # RuntimeError off the loop, which is what we want
        if self._computed:
            raise InvalidStateError(
                "This ModelOutputThunk is already computed; start a generation on a fresh "
                "ModelOutputThunk(None)."
            )
        if self._queue is not None:
            raise InvalidStateError(
                "A generation is already running on this ModelOutputThunk; use a fresh one."
            )
        self._action = action
        self._loop = loop
        self._started_at = time.perf_counter()
        self._queue = asyncio.Queue()
        self._cancel_hook = cancel_hook
        self._post_process = post_process

    def _push(self, item: object) -> None:
        loop, queue = self._loop, self._queue
        if self._cancelled or self._computed or self._error is not None:
            return  # a worker still pushing after the end: nobody is listening
        if loop is None or queue is None:
            raise InvalidStateError(
                "ModelOutputThunk._start_generation() must be called before pushing output."
            )
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:
            if not loop.is_closed():
                raise
            # The consumer's loop is gone: the output has no reader left.

    def _push_delta(self, text: str) -> None:
        """Append generated text; safe from any thread."""
        if not isinstance(text, str):
            raise InputTypeError(f"_push_delta expects a str, got {type(text).__name__}.")
        self._push(text)

    def _push_done(self) -> None:
        """Signal the end of the output; safe from any thread."""
        self._push(_DONE)

    def _push_error(self, exc: BaseException) -> None:
        """End the generation with an error the consumer will re-raise; safe from any thread."""
        self._push(_Failure(exc))

    # ----- consumer side ---------------------------------------------------------------

    async def astream(self) -> str:
        """Wait for new output and return the text added since the previous call.

        Raises RuntimeError once the thunk is computed: the full text is then in ``value``.
        """
        if self._error is not None:
            raise self._error
        if self._computed:
            raise InvalidStateError(
                "This ModelOutputThunk is already computed; read .value instead of streaming."
            )
        queue = self._queue
        if queue is None:
            raise InvalidStateError(
                "No generation was started for this ModelOutputThunk; get thunks from a "
                "backend's generate_from_context()."
            )
        try:
            items = [await queue.get()]
        except asyncio.CancelledError:
            # The awaiting task was cancelled (task.cancel(), a wait_for timeout): nobody will
            # read the rest, so stop the backend's worker and free the model for the next call.
            self.cancel_generation()
            raise
        while not queue.empty():
            items.append(queue.get_nowait())
        if self.generation.ttfb_ms is None and isinstance(items[0], str):
            started = self._started_at or time.perf_counter()
            self.generation.ttfb_ms = (time.perf_counter() - started) * 1000.0
            self.generation.streaming = True

        fresh: list[str] = []
        for item in items:
            if item is _CANCELLED or self._cancelled:
                break
            if isinstance(item, _Failure):
                self._error = item.exc
                self._clear_generation()
                raise item.exc
            if item is _DONE:
                self._deltas.extend(fresh)
                await self._finish()
                break
            fresh.append(item)
        else:
            self._deltas.extend(fresh)
        return "".join(fresh)

    async def _finish(self) -> None:
        self._underlying_value = "".join(self._deltas)
        post_process = self._post_process
        self._clear_generation()
        if post_process is not None:
            try:
                result = post_process(self)
                if inspect.isawaitable(result):
                    await result
            except BaseException as exc:
                self._error = exc
                raise
        if self._underlying_value is None:
            self._underlying_value = ""
        self._computed = True
        # A post_process that already produced a richer parse (e.g. a validated pydantic
        # instance for format=) wins over the action's own _parse.
        if self.parsed_repr is None:
            if isinstance(self._action, Component):
                try:
                    self.parsed_repr = parse(self._action, self)
                except BaseException as exc:
                    self._error = exc
                    raise
            else:
                self.parsed_repr = self._underlying_value  # type: ignore[assignment]

    async def avalue(self) -> str:
        """Drive the generation to its end and return the full text."""
        while True:
            if self._error is not None:
                raise self._error
            if self._computed:
                return self._underlying_value or ""
            await self.astream()

    def __aiter__(self) -> AsyncIterator[str]:
        """Iterate over the deltas; one consumer only. A computed thunk yields nothing."""
        if self._iterating:
            raise InvalidStateError(
                "This ModelOutputThunk already has a consumer; iterate it from one place only."
            )
        self._iterating = True
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[str]:
        try:
            while not self._computed:
                delta = await self.astream()
                if delta:
                    yield delta
        finally:
            self._iterating = False

    def cancel_generation(self) -> _Completed:
        """Stop the generation: run the backend's cancel hook, then mark the thunk computed.

        The value becomes the text streamed so far: every delta already read, plus those
        still queued when cancelling on the consumer's event loop (from another thread only
        the read ones); ``""`` if nothing streamed. It is the raw text: a partial output is
        not parsed. A consumer waiting in ``astream`` wakes up. Returns an already-finished
        awaitable, so both ``mot.cancel_generation()`` and ``await mot.cancel_generation()``
        work.
        """
        if self._computed:
            return _Completed()
        hook, loop, queue = self._cancel_hook, self._loop, self._queue
        streamed = list(self._deltas)
        try:
            if hook is not None:
                hook()
        finally:
            self._cancelled = True
            if queue is not None and _running_loop() is loop:
                while not queue.empty():
                    item = queue.get_nowait()
                    if isinstance(item, str):
                        streamed.append(item)
            if self._underlying_value is None:
                self._underlying_value = "".join(streamed)
            self._computed = True
            self._clear_generation()
            if loop is not None and queue is not None and not loop.is_closed():
                loop.call_soon_threadsafe(queue.put_nowait, _CANCELLED)
        return _Completed()

    async def aclose(self) -> None:
        """Cancel an unfinished generation (no-op once computed)."""
        self.cancel_generation()

    async def __aenter__(self) -> ModelOutputThunk[S]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ----- copies ------------------------------------------------------------------------

    def _require_computed_for_copy(self) -> None:
        if not self._computed:
            raise InvalidStateError(
                "Cannot copy an uncomputed ModelOutputThunk: the copy would not receive the "
                "rest of the stream. Await mot.avalue() first."
            )

    def __copy__(self) -> ModelOutputThunk[S]:
        self._require_computed_for_copy()
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        # A copy's metadata may be edited without touching the original's.
        new.__dict__["generation"] = copy.copy(self.generation)
        new.__dict__["raw"] = copy.copy(self.raw)
        new._clear_generation()
        if self.parsed_repr is self:
            new.parsed_repr = new  # type: ignore[assignment]
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> ModelOutputThunk[S]:
        self._require_computed_for_copy()
        new = object.__new__(type(self))
        memo[id(self)] = new
        for key, val in self.__dict__.items():
            if key in _GENERATION_FIELDS:
                continue
            # The action is the input this output answers, not part of the output.
            new.__dict__[key] = val if key == "_action" else copy.deepcopy(val, memo)
        new._clear_generation()
        return new


class ComputedModelOutputThunk(ModelOutputThunk[S]):
    """A finished thunk, reclassed in place (same object, no copy).

    It guarantees ``value`` stays a str and the thunk stays computed; ``parsed_repr`` and the
    other fields remain writable (the agent loop replaces the value with the final answer).
    """

    def __new__(cls, mot: ModelOutputThunk[S]) -> ComputedModelOutputThunk[S]:
        if not isinstance(mot, ModelOutputThunk):
            raise InputTypeError(
                "ComputedModelOutputThunk requires a computed ModelOutputThunk; got "
                f"{type(mot).__name__}."
            )
        if mot._error is not None:
            raise InvalidInputError(
                f"This ModelOutputThunk ended with an error ({mot._error!r}); handle the error "
                "instead of marking the output computed."
            ) from mot._error
        if not mot.is_computed():
            raise InvalidInputError(
                "ComputedModelOutputThunk requires a computed ModelOutputThunk; await "
                "mot.avalue() first."
            )
        if not isinstance(mot.value, str):
            raise InvalidInputError(
                "ComputedModelOutputThunk requires a non-None value (a str); set mot.value "
                "first."
            )
        mot.__class__ = cls
        return mot  # type: ignore[return-value]

    def __init__(self, mot: ModelOutputThunk[S]) -> None:
        # Deliberately empty: __new__ reclassed an already-initialised object.
        pass

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_computed" and value is not True:
            raise ThunkStateError(
                f"Setting _computed={value!r} would break the computed invariant of a "
                "ComputedModelOutputThunk; it stays computed (build a new ModelOutputThunk)."
            )
        if name in ("_underlying_value", "value") and not isinstance(value, str):
            raise ThunkStateError(
                f"Setting {name} to a {type(value).__name__} would break the computed "
                "invariant of a ComputedModelOutputThunk: its value stays a str."
            )
        super().__setattr__(name, value)

    async def astream(self) -> str:
        raise InvalidStateError(
            "Cannot stream from a ComputedModelOutputThunk: it is finished; read .value "
            "instead."
        )
