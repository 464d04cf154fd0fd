"""An intrinsic's prompt in token space: conversation, instruction turn, generation prompt.

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
from mellea_local.core.context import Context
from mellea_local.intrinsics.intrinsic import Intrinsic
from mellea_local.intrinsics.options import ScoringOptions
from mellea_local.messages import Message
from mellea_local.rendering import render_prompt, to_chat_messages, to_message_dicts


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` with no special tokens added."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def build_prompts(
    tokenizer: Any,
    intrinsic: Intrinsic,
    adapter: Adapter,
    ctx: Context,
    calls: Sequence[Mapping[str, Any]],
    options: ScoringOptions | None = None,
) -> list[TokenPrompt]:
    """One prompt per call (a mapping of the instruction's variables), in order.

    ``shared`` of each prompt is where the part it has in common with the base model ends:
    the conversation (up to the invocation for an aLoRA).
    """
    options = options or ScoringOptions()
    view = list(ctx.view_for_generation() or [])
    messages = to_chat_messages(view)
    intrinsic.check_conversation([m.role for m in messages], type(ctx).__name__)
    if options.system_prompt:
        messages.insert(0, Message("system", options.system_prompt))
    history = to_message_dicts(messages)
    kwargs = dict(options.template_kwargs)
    before = render_prompt(tokenizer, history, None, kwargs, add_generation_prompt=False).text

    prompts = []
    for variables in calls:
        instruction = intrinsic.instruction(variables)
        turns = [*history, {"role": "user", "content": instruction}] if instruction else history
        # Message text (the requirement included) that spells a control token stays text.
        rendered = render_prompt(tokenizer, turns, None, kwargs, add_generation_prompt=True)
        prompts.append(adapter.strategy.build_prompt(
            adapter, partial(rendered.encode_piece, tokenizer), rendered.text,
            _turn_start(before, rendered.text)))
    return prompts


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
