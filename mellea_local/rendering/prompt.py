"""Message dicts + tool specs -> prompt token ids through the tokenizer's chat template.

Rendering and tokenising happen once, in one call, so the ids a KV cache is keyed by are exactly
the ids the model sees (never re-tokenised per segment).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mellea_local.errors import UnsupportedInputError
from mellea_local.messages import Message


def check_text_only(messages: Sequence[Message], model_name: str) -> None:
    """Refuse images and audio for a text-only model instead of silently dropping them."""
    for i, m in enumerate(messages):
        for kind in ("images", "audio"):
            if getattr(m, kind, None):
                raise UnsupportedInputError(
                    f"Message {i} ({m.role}) carries {kind}, but {model_name} is a text-only "
                    f"model; remove the {kind} or use a multimodal model."
                )


def render_prompt_ids(
    tokenizer: Any,
    message_dicts: list[dict[str, Any]],
    tool_specs: list[dict[str, Any]] | None = None,
    template_kwargs: dict[str, Any] | None = None,
    *,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of the rendered conversation (with the assistant generation prompt)."""
    if not getattr(tokenizer, "chat_template", None):
        raise UnsupportedInputError(
            "The tokenizer has no chat template; load a chat/instruct model or set "
            "tokenizer.chat_template."
        )
    enc = tokenizer.apply_chat_template(
        message_dicts,
        tools=tool_specs or None,
        add_generation_prompt=add_generation_prompt,
        tokenize=True,
        return_dict=True,
        **(template_kwargs or {}),
    )
    ids = enc["input_ids"]
    return list(ids[0] if ids and isinstance(ids[0], list) else ids)
