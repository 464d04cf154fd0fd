"""The ReACT loop: think, act, observe, until the model calls ``final_answer``.

Each turn the model answers (with tool calling on); its tool calls run in order and each result
becomes a ``ToolMessage`` linked to its call id. Nothing the model does crashes the loop: an
unknown tool, arguments that break the schema and an exception inside a tool all become the
observation, and the model gets another turn. ``final_answer`` ends the loop only when it is the
turn's only call; mixed with other calls, those run and ``final_answer`` is answered with a
request to call it again, alone, now that their results are in.

What real small models get wrong, and what each becomes:

* an unknown tool, arguments that break the schema, a tool that raises: the observation says
  what went wrong (the parser or ``_run_call`` wrote it);
* the same valid call (name and arguments) made again: not run again; the observation gives
  the earlier result (or error), the next user turn asks for the answer, and that step may
  only call ``final_answer`` (``ModelOption.TOOL_CHOICE``, honoured under constraints);
* a step with no tool call at all: the next user turn says so and asks for a call;
* no ``final_answer`` within ``loop_budget``: ``ReactLoopError``, listing what each step did;
  ``ReactNoValidCallError`` (a subclass) when no step had one valid call, whose advice is not
  "more budget" but constrained decoding or a model trained for tool calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mellea_local.core.backend import Backend
from mellea_local.core.context import ChatContext, Context
from mellea_local.core.thunk import ComputedModelOutputThunk
from mellea_local.core.tool_call import ModelToolCall
from mellea_local.errors import (
    ContextError,
    InputTypeError,
    ReactArgumentError,
    ReactLoopError,
    ReactNoValidCallError,
    ToolArgumentsError,
)
from mellea_local.messages import ToolMessage
from mellea_local.options import ModelOption, merge_options
from mellea_local.react.components import (
    FORMAT_PROMPT,
    MELLEA_FINALIZER_TOOL,
    NO_CALL_PROMPT,
    REPEAT_PROMPT,
    ReactInitiator,
    ReactThought,
)
from mellea_local.rendering.chat import to_chat_messages
from mellea_local.tools.tool import AbstractMelleaTool, MelleaTool, observation_text

__all__ = ["react"]


def _check_budget(loop_budget: int) -> None:
    if isinstance(loop_budget, bool) or not isinstance(loop_budget, int) or loop_budget < -1:
        raise ReactArgumentError(
            f"loop_budget must be an int >= 0, or -1 for no limit; got {loop_budget!r}."
        )


def _ends_with_user_turn(ctx: Context) -> bool:
    last = ctx.as_list(1)
    return bool(last) and to_chat_messages(last)[-1].role == "user"


def _as_list(tools: Any, argument: str = "tools") -> list[Any]:
    if tools is None:
        return []
    if isinstance(tools, Mapping):
        return list(tools.values())
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Iterable):
        raise InputTypeError(
            f"{argument} must be a list of tools (MelleaTool objects or @tool functions), got "
            f"{type(tools).__name__}; wrap a single tool in a list: [tool]."
        )
    return list(tools)


async def _run_call(
    call: ModelToolCall, tool_map: Mapping[str, AbstractMelleaTool]
) -> tuple[Any, str, bool]:
    """``(tool_output, observation, ok)`` for one call; never raises for the model's mistakes."""
    if call.error is not None:
        return None, f"Error: {call.error}", False
    target = tool_map.get(call.name) or call.func
    if target is None:
        known = ", ".join(tool_map)
        text = f"Error: there is no tool named {call.name!r}. Available tools: {known}."
        return None, text, False
    if not isinstance(call.args, Mapping):
        text = f"Error: the arguments of {call.name!r} must be a JSON object of named values."
        return None, text, False
    if isinstance(target, MelleaTool):
        try:
            target.parse_arguments(call.args)
        except ToolArgumentsError as exc:
            return None, str(exc), False
    bound = ModelToolCall(call.name, target, dict(call.args), tool_call_id=call.tool_call_id)
    try:
        output = await bound.acall_func()
    except Exception as exc:
        return exc, f"Error: tool {call.name!r} failed: {type(exc).__name__}: {exc}", False
    return output, observation_text(output), True


def _call_key(call: ModelToolCall) -> str | None:
    """Name and arguments of a call, canonical; None when they are not plain JSON."""
    if call.error is not None or not isinstance(call.args, Mapping):
        return None
    try:
        return json.dumps([call.name, call.args], sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return None


class _Steps:
    """What each step did, for the budget error and for spotting repeated calls."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.valid_calls = 0
        self.constrained = False  # some step was decoded under the tool-call grammar
        self.repeated = False  # the last step repeated an earlier call
        self.done: dict[str, tuple[int, str]] = {}  # call key -> (step, observation)

    def record(self, step: int, observations: Sequence[ToolMessage],
               states: Sequence[tuple[bool, bool]]) -> None:
        """``states``: per call, (it ran fine, it was a valid call: an offered tool with
        well-formed arguments, whatever the tool then did)."""
        if not observations:
            self.lines.append(f"step {step}: no tool call")
            return
        parts = []
        for message, (ok, valid) in zip(observations, states, strict=True):
            self.valid_calls += valid
            said = message.content.splitlines()[0][:160] if message.content else ""
            parts.append(f"{message.name or '?'}: " + ("ok" if ok else said))
        self.lines.append(f"step {step}: " + "; ".join(parts))

    def error(self, budget: int) -> ReactLoopError:
        listing = "\n".join(self.lines[-8:])
        if self.valid_calls == 0 and self.constrained:
            return ReactNoValidCallError(
                f"could not complete react loop in {budget} iterations: the model never wrote "
                "a valid tool call, even with its calls constrained to the tools' schemas "
                "(the steps below were cut off or misused the tools), so more budget would "
                "not help. Use a model trained for tool calls (an agent build), raise "
                "ModelOption.MAX_NEW_TOKENS if calls were cut off, or offer fewer, simpler "
                "tools. Steps:\n" + listing)
        if self.valid_calls == 0:
            return ReactNoValidCallError(
                f"could not complete react loop in {budget} iterations: the model never wrote "
                f"a valid tool call, so more budget would not help. Constrain its calls to the "
                "tools (model_options={ModelOption.CONSTRAIN_TOOL_CALLS: True}; on by default "
                "for a chat template without a tool slot), use a model trained for tool calls "
                "(an agent build), or offer fewer, simpler tools. Steps:\n" + listing)
        return ReactLoopError(
            f"could not complete react loop in {budget} iterations: the model never called "
            f"{MELLEA_FINALIZER_TOOL} alone. Raise loop_budget if the steps were making "
            "progress, otherwise simplify the goal or check the tool results. Steps:\n"
            + listing)


async def _observe(
    calls: Sequence[ModelToolCall], tool_map: Mapping[str, AbstractMelleaTool],
    steps: _Steps | None = None, step: int = 0,
) -> tuple[list[ToolMessage], ToolMessage | None]:
    """The turn's observations, in call order, and the final answer if this turn gave one."""
    observations: list[ToolMessage] = []
    states: list[tuple[bool, bool]] = []
    final: ToolMessage | None = None
    if steps is not None:
        steps.repeated = False
    for call in calls:
        key = _call_key(call) if call.name != MELLEA_FINALIZER_TOOL else None
        earlier = steps.done.get(key) if steps is not None and key is not None else None
        if earlier is not None:
            output: Any = None
            text = (
                f"Error: you already called {call.name} with these arguments at step "
                f"{earlier[0]}; it returned: {earlier[1]}\nDo not repeat a call: use that "
                f"result, change the arguments, call a different tool, or call "
                f"{MELLEA_FINALIZER_TOOL} with the answer."
            )
            ok, valid = False, True
            if steps is not None:
                steps.repeated = True
        elif call.name == MELLEA_FINALIZER_TOOL and len(calls) > 1:
            output: Any = None
            text = (
                f"Error: {MELLEA_FINALIZER_TOOL} was called together with other tools, so it "
                f"did not end the task. Read the other results, then call "
                f"{MELLEA_FINALIZER_TOOL} again, alone."
            )
            ok, valid = False, True
        else:
            output, text, ok = await _run_call(call, tool_map)
            valid = ok or isinstance(output, Exception)  # the tool itself raised
            if valid and key is not None and steps is not None:
                steps.done[key] = (step, text)
        args = dict(call.args) if isinstance(call.args, Mapping) else {}
        message = ToolMessage("tool", text, output, call.name, args, call)
        observations.append(message)
        states.append((ok, valid))
        if ok and call.name == MELLEA_FINALIZER_TOOL:
            final = message
    if steps is not None:
        steps.record(step, observations, states)
    return observations, final


def _compact(compactor: Any, ctx: ChatContext, initiator: ReactInitiator) -> ChatContext:
    compacted = compactor.compact(ctx)
    if not isinstance(compacted, ChatContext):
        raise InputTypeError(
            f"{type(compactor).__name__}.compact returned {type(compacted).__name__}; a "
            "compactor used with react must return a ChatContext (build it with "
            "ctx.with_history(spans))."
        )
    if not any(span is initiator for span in compacted.as_list() or []):
        raise ContextError(
            f"{type(compactor).__name__} dropped the ReactInitiator, which holds the goal and "
            "the tools; compose the compactor with pin_react_initiator."
        )
    if _ends_with_user_turn(compacted):
        raise ContextError(
            f"{type(compactor).__name__} left the context ending with a user turn, so the "
            "next thought would make two consecutive user turns; keep at least the newest "
            "turn's observations (e.g. a window of size >= 1)."
        )
    return compacted


async def react(
    goal: str,
    context: ChatContext,
    backend: Backend,
    *,
    format: type[Any] | None = None,
    model_options: dict[str, Any] | None = None,
    tools: Sequence[AbstractMelleaTool | Callable[..., Any]] | None = None,
    loop_budget: int = 10,
    compactor: Any = None,
) -> tuple[ComputedModelOutputThunk[str], ChatContext]:
    """Work towards ``goal`` with ``tools`` until the model calls ``final_answer``.

    Returns the final turn's output, whose ``value`` is the final answer (``parsed_repr`` keeps
    the model's own text), and the context with the whole exchange. With ``format`` (a pydantic
    model) one more generation, without tools, writes the final answer as that model's JSON;
    its thunk is returned and ``parsed_repr`` holds the validated instance.

    ``loop_budget`` counts model turns (-1: no limit); running out raises ``RuntimeError``.
    ``model_options`` go to every generation; tools given there under ``ModelOption.TOOLS``
    join ``tools`` (neither list is changed). ``compactor.compact(ctx)`` runs once per turn
    after the observations and must return a ``ChatContext`` that keeps the initiator.

    The context must not end with a user turn: the initiator is one, and two in a row break
    strict chat templates.
    """
    if not isinstance(context, ChatContext):
        raise InputTypeError(
            f"react needs a ChatContext (the model must see the earlier turns), got "
            f"{type(context).__name__}."
        )
    _check_budget(loop_budget)
    if compactor is not None and not callable(getattr(compactor, "compact", None)):
        raise InputTypeError(
            f"compactor must have a compact(ctx) method, got {type(compactor).__name__}."
        )
    opts = merge_options(None, model_options)
    extra_tools = _as_list(opts.pop(ModelOption.TOOLS, None), "ModelOption.TOOLS")
    initiator = ReactInitiator(goal, [*_as_list(tools), *extra_tools])
    tool_map = initiator.tool_map
    if _ends_with_user_turn(context):
        raise ReactArgumentError(
            "The context ends with a user turn and the ReACT goal is another one; strict chat "
            "templates reject two user turns in a row. Put that request into the goal, or pass "
            "a context that ends with an assistant or system turn."
        )
    if loop_budget == 0:
        raise ReactLoopError(
            "could not complete react loop in 0 iterations; give loop_budget >= 1 (or -1)."
        )

    action: ReactInitiator | ReactThought = initiator
    step_opts = opts
    steps = _Steps()
    turn = 0
    while loop_budget == -1 or turn < loop_budget:
        turn += 1
        mot, new_ctx = await backend.generate_from_context(
            action, context, model_options=step_opts, tool_calls=True
        )
        await mot.avalue()
        step: ComputedModelOutputThunk[str] = ComputedModelOutputThunk(mot)
        steps.constrained |= bool(mot.meta.get("tool_grammar"))
        context = _require_chat(new_ctx, backend)
        calls = list(step.tool_calls or [])
        observations, final = await _observe(calls, tool_map, steps, turn)
        for message in observations:
            context = context.add(message)
        if final is not None:
            if format is None:
                step.value = final.content
                return step, context
            return await _formatted_answer(context, backend, format, opts)
        if compactor is not None:
            context = _compact(compactor, context, initiator)
        step_opts = opts
        if steps.repeated:
            # Looping on a call whose result it has: under constraints the next step may only
            # answer (ModelOption.TOOL_CHOICE); without them, the prompt asks for it.
            action = ReactThought(REPEAT_PROMPT)
            step_opts = {**opts, ModelOption.TOOL_CHOICE: MELLEA_FINALIZER_TOOL}
        else:
            action = ReactThought() if calls else ReactThought(NO_CALL_PROMPT)
            step_opts = opts
    raise steps.error(loop_budget)


def _require_chat(ctx: Context, backend: Backend) -> ChatContext:
    if not isinstance(ctx, ChatContext):
        raise InputTypeError(
            f"{type(backend).__name__}.generate_from_context returned a {type(ctx).__name__}; "
            "it must return the ChatContext it was given, extended."
        )
    return ctx


async def _formatted_answer(
    context: ChatContext, backend: Backend, format: type[Any], opts: dict[str, Any]
) -> tuple[ComputedModelOutputThunk[str], ChatContext]:
    mot, new_ctx = await backend.generate_from_context(
        ReactThought(FORMAT_PROMPT), context, format=format, model_options=opts
    )
    await mot.avalue()
    return ComputedModelOutputThunk(mot), _require_chat(new_ctx, backend)

