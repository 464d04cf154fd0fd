"""``mellea-local chat``: an interactive conversation that keeps its history.

Reads lines with ``input()`` (so scripts and tests can pipe a conversation in), answers each with
the whole history as context, shows the model's thinking dimmed above its answer. ``/reset``
starts over (keeping the system prompt), ``/quit`` or end of input leaves.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rich.console import Console

from mellea_local.core.context import ChatContext
from mellea_local.messages import Message
from mellea_local.options import ModelOption

PROMPT = "you> "


def _fresh(system: str | None) -> ChatContext:
    ctx = ChatContext()
    return ctx.add(Message("system", system)) if system else ctx


async def _answer(
    backend: Any, ctx: ChatContext, text: str, options: dict[str, Any]
) -> tuple[Any, ChatContext]:
    mot, new_ctx = await backend.generate_from_context(Message("user", text), ctx,
                                                       model_options=options)
    await mot.avalue()
    return mot, new_ctx


def run_chat(
    backend: Any, *, console: Console, system: str | None = None, thinking: bool = True,
    max_new_tokens: int = 256,
) -> int:
    """The read-answer loop; returns the number of turns answered."""
    options = {ModelOption.MAX_NEW_TOKENS: max_new_tokens, ModelOption.THINKING: thinking}
    ctx = _fresh(system)
    turns = 0
    console.print("chat: /reset starts over, /quit leaves", style="dim")
    while True:
        try:
            text = input(PROMPT)
        except EOFError:
            break
        command = text.strip()
        if not command:
            continue
        if command == "/quit":
            break
        if command == "/reset":
            ctx = _fresh(system)
            console.print("(history cleared)", style="dim")
            continue
        with console.status("thinking..."):
            mot, ctx = asyncio.run(_answer(backend, ctx, text, options))
        if mot.thinking:
            console.print(mot.thinking.strip(), style="dim italic", markup=False,
                          highlight=False)
        console.print(f"assistant> {mot.value or ''}", markup=False, highlight=False)
        turns += 1
    return turns
