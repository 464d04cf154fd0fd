"""``mellea-local chat``: an interactive conversation that keeps its history.

Reads lines with ``input()`` (so scripts and tests can pipe a conversation in), answers each with
the whole history as context, shows the model's thinking dimmed above its answer. A line that
is one slash word is a command for the chat itself, never sent to the model: ``/help`` lists
them, ``/reset`` starts over (keeping the system prompt), ``/quit`` (or end of input) leaves;
an unknown one is answered with the list.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from rich.console import Console

from mellea_local.core.context import ChatContext
from mellea_local.messages import Message
from mellea_local.options import ModelOption

PROMPT = "you> "
COMMANDS = {
    "/help": "list these commands",
    "/reset": "forget the conversation (the system prompt stays)",
    "/quit": "leave (so does end of input, Ctrl-D)",
}
_COMMAND = re.compile(r"/[A-Za-z]+")


def _print_help(console: Console) -> None:
    for name, what in COMMANDS.items():
        console.print(f"  {name:<7} {what}", style="dim", markup=False, highlight=False)


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
    console.print("chat: /help lists the commands, /quit leaves", style="dim")
    while True:
        try:
            text = input(PROMPT)
        except EOFError:
            break
        command = text.strip()
        if not command:
            continue
        if _COMMAND.fullmatch(command):
            if command in ("/quit", "/exit"):
                break
            if command == "/reset":
                ctx = _fresh(system)
                console.print("(history cleared)", style="dim")
            else:
                if command != "/help":
                    console.print(f"unknown command {command}; the commands are:",
                                  style="yellow", markup=False, highlight=False)
                _print_help(console)
            continue
        with console.status("thinking..."):
            mot, ctx = asyncio.run(_answer(backend, ctx, text, options))
        if mot.thinking:
            console.print(mot.thinking.strip(), style="dim italic", markup=False,
                          highlight=False)
        console.print(f"assistant> {mot.value or ''}", markup=False, highlight=False)
        turns += 1
    return turns
