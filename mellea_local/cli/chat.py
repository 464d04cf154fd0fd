"""``mellea-local chat``: an interactive conversation that keeps its history.

Reads lines with ``input()`` (so scripts and tests can pipe a conversation in), answers each with
the whole history as context, shows the model's thinking dimmed above its answer, and only when
the model produced some: a thinking block is one the prompt opened (the chat template's
thinking switch) or one the answer opens with ``<think>``. SmolLM2's template has no switch,
and its answers, taken for thinking, were printed twice (dimmed, then again). A line that
is one slash word is a command for the chat itself, never sent to the model: ``/help`` lists
them, ``/reset`` starts over (keeping the system prompt), ``/quit`` (or end of input) leaves;
an unknown one is answered with the list. Answers stream as they are generated; Ctrl-C while
one streams stops that answer (the model's worker too) and the chat goes on.
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


THINK_END = "</think>"


THINK_OPEN = "<think>"


class StreamPrinter:
    """Prints an answer as its deltas arrive: thinking dimmed, then ``assistant> `` and the
    answer. ``thinking``: the prompt opened a thinking block, so the stream holds the thinking
    first and ``</think>`` before the answer; otherwise an answer that starts with ``<think>``
    opens one itself. A marker split across deltas is held back until it is whole."""

    def __init__(self, console: Console, thinking: bool) -> None:
        self.console = console
        self.in_thinking = thinking
        self.held = ""
        self.thought = self.answered = False
        self.started = thinking  # past the point where an answer may open a block itself

    def _out(self, text: str) -> None:
        if not text:
            return
        if self.in_thinking:
            self.thought = True
            self.console.print(text, end="", style="dim italic", markup=False, highlight=False)
            return
        if not self.answered:
            if self.thought:
                self.console.print()
            self.console.print("assistant> ", end="", markup=False, highlight=False)
            self.answered = True
        self.console.print(text, end="", markup=False, highlight=False)

    def feed(self, delta: str) -> None:
        text = self.held + delta
        self.held = ""
        if not self.started:
            stripped = text.lstrip()
            if THINK_OPEN.startswith(stripped) and len(stripped) < len(THINK_OPEN):
                self.held = text  # perhaps the start of "<think>": wait for more
                return
            self.started = True
            if stripped.startswith(THINK_OPEN):
                self.in_thinking = True
                text = stripped
        if self.in_thinking:
            text = text.removeprefix("<think>") if not self.thought else text
            if THINK_END in text:
                before, after = text.split(THINK_END, 1)
                self._out(before)
                self.in_thinking = False
                self._out(after.lstrip("\n"))
                return
            keep = next((k for k in range(len(THINK_END) - 1, 0, -1)
                         if text.endswith(THINK_END[:k])), 0)
            self.held = text[len(text) - keep:] if keep else ""
            self._out(text[:len(text) - keep] if keep else text)
            return
        self._out(text)

    def finish(self, mot: Any, *, stopped: bool = False) -> None:
        """End the answer's line; what never streamed (a backend that does not stream, an
        answer that never left the thinking block) is printed from the finished output."""
        if stopped:
            if self.thought or self.answered:
                self.console.print()
            self.console.print("(answer stopped)", style="yellow", markup=False,
                               highlight=False)
            return
        if not self.thought and getattr(mot, "thinking", None):
            self.console.print(mot.thinking.strip(), style="dim italic", markup=False,
                               highlight=False)
            self.thought = True
        if self.held and not self.in_thinking and not self.answered:
            self.held = ""  # a lone "<thi..." that never became a marker: the answer has it
        elif self.held:
            self._out(self.held)
            self.held = ""
        if self.answered:
            self.console.print()
        else:
            if self.thought and self.in_thinking:
                self.console.print()
            self.console.print(f"assistant> {mot.value or ''}", markup=False, highlight=False)


async def _answer(
    backend: Any, ctx: ChatContext, text: str, options: dict[str, Any], printer: StreamPrinter,
) -> ChatContext:
    mot, new_ctx = await backend.generate_from_context(Message("user", text), ctx,
                                                       model_options=options)
    try:
        async for delta in mot:
            printer.feed(delta)
        await mot.avalue()
    except BaseException:
        # Ctrl-C (a KeyboardInterrupt here, or asyncio cancelling this task): stop the
        # model's worker so the backend is free for the next question.
        mot.cancel_generation()
        raise
    printer.finish(mot)
    return new_ctx


def prompt_opens_thinking(backend: Any, ctx: ChatContext, text: str,
                          options: dict[str, Any]) -> bool:
    """Whether the prompt for ``text`` ends inside a ``<think>`` the template opened: read
    from the rendered ids, not assumed from ``--thinking`` (most templates have no switch).
    A backend that cannot render says no; the answer may still open a block itself."""
    render = getattr(backend, "render", None)
    if render is None:
        return False
    from mellea_local.backends.finish import prompt_opens_thinking as opens

    try:
        ids, _, _ = render(Message("user", text), ctx, model_options=options)
        return opens(backend.tokenizer, ids)
    except Exception:  # the generation right after raises it with its own message
        return False


def _short_model_name(model: str) -> str:
    """A model converted into the model cache by its name: the cache path (a hash folder)
    says nothing to the user who typed ``--model smollm2-135m``."""
    from pathlib import Path

    from mellea_local.models import models_root

    try:
        if Path(model).resolve().is_relative_to(models_root().resolve()):
            return Path(model).name
    except (OSError, ValueError):
        pass
    return model


def banner(backend: Any) -> str:
    """Which model answers, with which adapters: what a user needs to read the answers."""
    model = getattr(backend, "model_id", None) or type(backend).__name__
    model = _short_model_name(str(model))
    where = getattr(backend, "device", None)
    adapters = getattr(backend, "adapters", None)
    names = ", ".join(sorted(adapters)) if isinstance(adapters, dict) and adapters else "none"
    return (f"chat with {model}{f' on {where}' if where else ''}; adapters: {names}\n"
            "/help lists the commands, Ctrl-C stops an answer, /quit leaves")


def run_chat(
    backend: Any, *, console: Console, system: str | None = None, thinking: bool = True,
    max_new_tokens: int = 256,
) -> int:
    """The read-answer loop; returns the number of turns answered (a stopped one is not)."""
    options = {ModelOption.MAX_NEW_TOKENS: max_new_tokens, ModelOption.THINKING: thinking,
               ModelOption.STREAM: True}
    ctx = _fresh(system)
    turns = 0
    console.print(banner(backend), style="dim", markup=False, highlight=False)
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
        printer = StreamPrinter(
            console, thinking and prompt_opens_thinking(backend, ctx, text, options))
        try:
            ctx = asyncio.run(_answer(backend, ctx, text, options, printer))
        except KeyboardInterrupt:
            # The answer stops, the chat goes on; the unfinished turn is not kept in history.
            printer.finish(None, stopped=True)
            continue
        turns += 1
    return turns
