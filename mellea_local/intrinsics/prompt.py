"""An intrinsic's prompt in token space: conversation, instruction turn, generation prompt.

The conversation is rewritten as the io.yaml asks first (``rewrite``: sentence markers,
documents); images and audio are refused as for a text-only generation.

Rendering goes through the runner's chat template in one call per prompt, so the conversation's
tokens are exactly those a generation rendered (the base KV cache is keyed by them). Where the
adapter starts acting is the adapter kind's business (``Adapter.strategy.build_prompt``): an
aLoRA's invocation is located in token space, spliced in where the text spells it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from mellea_local.adapters import Adapter, TokenPrompt
from mellea_local.adapters.sentences import MarkedInputs
from mellea_local.core.context import Context
from mellea_local.intrinsics.intrinsic import Intrinsic
from mellea_local.intrinsics.options import ScoringOptions
from mellea_local.intrinsics.rewrite import rewrite_conversation
from mellea_local.options import template_variables
from mellea_local.rendering import render_prompt, to_chat_messages
from mellea_local.rendering.prompt import check_text_only
from mellea_local.rendering.tool_prompt import (
    hermes_messages,
    needs_tool_prompt,
    template_renders_tool_role,
)
from mellea_local.rendering.tools import collect_tools


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` with no special tokens added."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def build_prompts(*args: Any, **kwargs: Any) -> list[TokenPrompt]:
    """The prompts of ``build_request`` (same arguments), one per call, in order.

    ``shared`` of each prompt is where the part it has in common with the base model ends:
    the conversation (up to the invocation for an aLoRA).
    """
    return build_request(*args, **kwargs)[0]


def build_request(
    tokenizer: Any,
    intrinsic: Intrinsic,
    adapter: Adapter,
    ctx: Context,
    calls: Sequence[Mapping[str, Any]],
    options: ScoringOptions | None = None,
) -> tuple[list[TokenPrompt], MarkedInputs | None]:
    """The prompts of ``build_prompts`` and the marked texts the output rules decode from.

    The conversation goes through the same steps as a generation's (``to_chat_messages``,
    the text-only check, the chat template), then through the io.yaml's input rewriting
    (``rewrite_conversation``: sentence markers, documents, instruction).
    """
    options = options or ScoringOptions()
    view = list(ctx.view_for_generation() or [])
    messages = to_chat_messages(view)
    intrinsic.check_conversation([m.role for m in messages], type(ctx).__name__)
    # Adapters read text: an image or audio clip would be dropped silently, so it is refused
    # with the error a generation on a text-only model gives.
    check_text_only(messages, f"intrinsic {intrinsic.name!r}")
    conversation = rewrite_conversation(
        intrinsic.config, messages, template_variables(getattr(tokenizer, "chat_template", None)))
    history = conversation.turns
    if options.system_prompt:
        history = [{"role": "system", "content": options.system_prompt}, *history]
    kwargs = {**conversation.template_kwargs, **options.template_kwargs}
    # A conversation that offered tools (an agent run: its ReactInitiator holds them) is
    # rendered as its steps were (``rendering.request``): the same tool block, calls and
    # results, in the template's format or the Hermes one. The check then reads what the
    # agent read, and its prefix is the one the agent's steps left in the base cache.
    specs = [spec for _, spec in collect_tools(None, view, None).values()] or None
    before = _render(tokenizer, history, specs, kwargs, generation=False).text

    prompts = []
    for variables in calls:
        instruction = intrinsic.instruction(variables, last_message=conversation.last_message)
        turns = [*history, {"role": "user", "content": instruction}] if instruction else history
        # Message text (the requirement included) that spells a control token stays text.
        rendered = _render(tokenizer, turns, specs, kwargs, generation=True)
        prompts.append(adapter.strategy.build_prompt(
            adapter, partial(rendered.encode_piece, tokenizer), rendered.text,
            _turn_start(before, rendered.text)))
    return prompts, conversation.marked


def _render(tokenizer: Any, turns: list[dict[str, Any]], specs: list[dict[str, Any]] | None,
            kwargs: dict[str, Any], *, generation: bool) -> Any:
    """``render_prompt`` with the conversation's tools, as a generation renders them."""
    if needs_tool_prompt(tokenizer, turns, specs):
        turns = hermes_messages(turns, specs, tool_role=template_renders_tool_role(tokenizer))
        specs = None
    return render_prompt(tokenizer, turns, specs, kwargs, add_generation_prompt=generation)


def _turn_start(before: str, text: str) -> int:
    """Where the intrinsic's own turn starts in ``text``: the end of the part it shares with
    the rendered conversation alone (templates that rewrite earlier turns share less)."""
    # Binary search on slice equality (C speed): a character loop cost ~1 ms per 5k chars.
    lo, hi = 0, min(len(before), len(text))
    if before[:hi] == text[:hi]:
        return hi
    while lo < hi:  # invariant: before[:lo] == text[:lo] and before[:hi] != text[:hi]
        mid = (lo + hi + 1) // 2
        if before[:mid] == text[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
