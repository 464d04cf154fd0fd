"""Message dicts + tool specs -> prompt token ids through the tokenizer's chat template.

The prompt is rendered once and tokenised once, so the ids a KV cache is keyed by are exactly the
ids the model sees (never re-tokenised per segment); message text that spells a control token
is tokenised as text (``control_tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mellea_local.errors import UnsupportedInputError
from mellea_local.messages import Message
from mellea_local.rendering.control_tokens import Neutraliser, RenderedPrompt


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
    neutral = Neutraliser(tokenizer)
    text = tokenizer.apply_chat_template(
        neutral(message_dicts),
        tools=neutral(tool_specs) or None,
        add_generation_prompt=add_generation_prompt,
        tokenize=False,
        **(template_kwargs or {}),
    )
    return neutral.restore(text)


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
