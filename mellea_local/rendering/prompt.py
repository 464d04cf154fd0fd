"""Message dicts + tool specs -> prompt token ids through the tokenizer's chat template.

The prompt is rendered once and tokenised once, so the ids a KV cache is keyed by are exactly the
ids the model sees (never re-tokenised per segment); message text that spells a control token
is tokenised as text (``control_tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mellea_local.errors import PromptTooLongError, UnsupportedInputError
from mellea_local.messages import Message
from mellea_local.rendering.control_tokens import Neutraliser, RenderedPrompt
from mellea_local.rendering.memo import json_key, memoised, vocab_size
from mellea_local.rendering.sandbox import check_messages_rendered, render_chat


def check_text_only(messages: Sequence[Message], model_name: str) -> None:
    """Refuse images and audio for a text-only model instead of silently dropping them."""
    for i, m in enumerate(messages):
        for kind in ("images", "audio"):
            if getattr(m, kind, None):
                raise UnsupportedInputError(
                    f"Message {i} ({m.role}) carries {kind}, but {model_name} is a text-only "
                    f"model; remove the {kind} or use a multimodal model."
                )


def render_prompt(
    tokenizer: Any,
    message_dicts: list[dict[str, Any]],
    tool_specs: list[dict[str, Any]] | None = None,
    template_kwargs: dict[str, Any] | None = None,
    *,
    add_generation_prompt: bool = True,
) -> RenderedPrompt:
    """The conversation rendered by the chat template, message text kept as plain text.

    ``.encode(tokenizer)`` gives the prompt ids; see ``control_tokens`` for why content that
    spells a special token is not tokenised as one.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise UnsupportedInputError(
            "The tokenizer has no chat template; load a chat/instruct model or set "
            "tokenizer.chat_template."
        )

    def render() -> RenderedPrompt:
        neutral = Neutraliser(tokenizer)
        shown = neutral(message_dicts)
        # The template came with the model: rendered in a bounded sandbox (sandbox.py), the
        # same text apply_chat_template would return, and refused if it drops the messages.
        text = render_chat(
            tokenizer,
            shown,
            tools=neutral(tool_specs, "tools") or None,
            add_generation_prompt=add_generation_prompt,
            **(template_kwargs or {}),
        )
        check_messages_rendered(shown, text)
        return neutral.restore(text)

    # The same conversation is rendered once per check of a turn: remember the result.
    key = json_key(tokenizer.chat_template, vocab_size(tokenizer), message_dicts, tool_specs,
                   template_kwargs, add_generation_prompt)
    return render() if key is None else memoised(tokenizer, "render", key, render)


def render_prompt_ids(
    tokenizer: Any,
    message_dicts: list[dict[str, Any]],
    tool_specs: list[dict[str, Any]] | None = None,
    template_kwargs: dict[str, Any] | None = None,
    *,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of the rendered conversation (with the assistant generation prompt)."""
    rendered = render_prompt(tokenizer, message_dicts, tool_specs, template_kwargs,
                             add_generation_prompt=add_generation_prompt)
    return rendered.encode(tokenizer)


_UNSET_MAX_LENGTH = 10**9
"""transformers writes int(1e30) as a tokenizer's model_max_length when it does not know one."""


def position_limit(model: Any, tokenizer: Any) -> tuple[int, str] | None:
    """How many positions the model has, and where that number comes from (None: unknown)."""
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value, f"config.{key}"
    value = getattr(tokenizer, "model_max_length", None)
    if isinstance(value, int) and 0 < value < _UNSET_MAX_LENGTH:
        return value, "tokenizer.model_max_length"
    return None


def check_prompt_fits(
    length: int, limit: tuple[int, str] | None, model_name: str, *, generating: bool
) -> None:
    """Refuse a prompt the model has no positions for, before any forward pass.

    Past its positions a model reads garbage position encodings (or indexes out of range), so
    the output would be silently wrong. Generating needs one free position after the prompt.
    """
    if limit is None:
        return
    most, source = limit
    room = most - 1 if generating else most
    if length > room:
        need = "leaves no position to generate in" if length == most else "does not fit"
        raise PromptTooLongError(
            f"The prompt is {length} tokens, but {model_name} has {most} positions "
            f"({source}), so it {need}. Shorten the conversation (drop or summarise old "
            "turns, e.g. with a WindowCompactor), or use a model with a longer context."
        )
