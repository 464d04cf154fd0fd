"""Filling a generation's thunk from its output: text, thinking, tool calls, usage, finish.

Shared by the backends that decode with our tokenizer and parse with our parsers
(``LocalHFBackend``, ``LlamaServerBackend``), so the same generated ids give the same thunk
whichever engine produced them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from mellea_local.core.generation import RawProviderResponse
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.core.tool_call import ModelToolCall
from mellea_local.errors import ComponentParseError
from mellea_local.parsing import ParsedResponse, parse_with_tokenizer
from mellea_local.parsing.response import THINK_OPEN


@dataclass(frozen=True)
class GenerationOutput:
    """What a backend's generation produced, engine-independent."""

    new_ids: Sequence[int]
    prompt_tokens: int
    stopped_by_eos: bool
    cancelled: bool


def prompt_opens_thinking(tokenizer: Any, ids: Sequence[int]) -> bool:
    """Whether the prompt ends inside an opened ``<think>`` (the template started thinking)."""
    tail = tokenizer.decode(list(ids[-8:]), skip_special_tokens=False)
    return tail.rstrip().endswith(THINK_OPEN)


def finish_thunk(
    mot: ModelOutputThunk[Any],
    gen: GenerationOutput,
    *,
    tokenizer: Any,
    provider: str,
    model_id: str,
    streaming: bool,
    stop_strings: Sequence[str],
    tools: Mapping[str, tuple[Any, dict[str, Any]]],
    format: type[Any] | None,
    thinking_started: bool,
    request_tools: bool,
) -> None:
    """Set the thunk's value, thinking, tool calls, usage and finish reason from ``gen``."""
    text = tokenizer.decode(list(gen.new_ids), skip_special_tokens=True)
    hit_stop = next((s for s in stop_strings if text.endswith(s)), None)
    if hit_stop:
        text = text[: -len(hit_stop)]
    mot.meta["raw_text"] = text
    mot.generation.model = model_id
    mot.generation.provider = provider
    mot.generation.streaming = streaming
    mot.raw = RawProviderResponse(provider=provider, response=text)
    mot.usage = {
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": len(gen.new_ids),
        "total_tokens": gen.prompt_tokens + len(gen.new_ids),
    }
    if format is not None:
        mot.value = text
        mot.finish_reason = "stop" if gen.stopped_by_eos else "length"
        try:
            mot.parsed_repr = format.model_validate_json(text)
        except pydantic.ValidationError as exc:
            hint = ("it was cut off at the token limit; raise ModelOption.MAX_NEW_TOKENS"
                    if mot.finish_reason == "length" else "the grammar let it through")
            raise ComponentParseError(
                f"The output does not validate as {format.__name__}: {hint}. "
                f"({exc.error_count()} error(s); text: {text[:200]!r})"
            ) from exc
        return
    # With tool calling on, a call to an undeclared tool is an error the agent loop reports
    # back ({} = "no tools"); with it off, tool-call-looking text is checked only as JSON.
    specs = {name: spec["function"] for name, (_, spec) in tools.items()}
    parsed: ParsedResponse = parse_with_tokenizer(
        text, tokenizer, tools=specs if request_tools else None,
        thinking_started=thinking_started,
    )
    mot.value = parsed.content
    mot.thinking = parsed.thinking
    if parsed.tool_calls:
        mot.tool_calls = tool_call_list(parsed, tools)
    if parsed.truncated_thinking or not (gen.stopped_by_eos or hit_stop or gen.cancelled):
        mot.finish_reason = "length"
    elif parsed.tool_calls:
        mot.finish_reason = "tool_calls"
    else:
        mot.finish_reason = "stop"


def tool_call_list(
    parsed: ParsedResponse, tools: Mapping[str, tuple[Any, dict[str, Any]]]
) -> list[ModelToolCall]:
    """The calls in the order the model wrote them, each bound to the tool that serves it."""
    return [
        ModelToolCall(
            call.name, tools.get(call.name, (None, None))[0], dict(call.arguments),
            tool_call_id=call.id, error=call.error, raw_arguments=call.raw_arguments,
        )
        for call in parsed.tool_calls
    ]
