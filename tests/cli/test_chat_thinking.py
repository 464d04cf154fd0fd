"""``chat`` shows a thinking block only when the model produced one: an answer from a template
without a thinking switch (SmolLM2's) printed twice, once dimmed as if it were thinking."""

from __future__ import annotations

from rich.console import Console

from mellea_local.cli.chat import StreamPrinter, prompt_opens_thinking
from mellea_local.core.context import ChatContext
from mellea_local.options import ModelOption


class Done:
    def __init__(self, value: str, thinking: str | None = None) -> None:
        self.value, self.thinking = value, thinking


def _print(deltas: list[str], done: Done, *, opened: bool) -> str:
    console = Console(record=True, width=200)
    printer = StreamPrinter(console, thinking=opened)
    for delta in deltas:
        printer.feed(delta)
    printer.finish(done)
    return console.export_text()


def test_an_answer_without_thinking_is_printed_once():
    text = _print(["The capital ", "is Paris."], Done("The capital is Paris."), opened=False)
    assert text == "assistant> The capital is Paris.\n"


def test_an_answer_that_opens_its_own_block_is_split():
    text = _print(["<thi", "nk>Hmm.</think>", "Paris."], Done("Paris.", "Hmm."), opened=False)
    assert text == "Hmm.\nassistant> Paris.\n"


def test_a_lone_prefix_that_never_became_a_marker_is_the_answer():
    text = _print(["<th"], Done("<th"), opened=False)
    assert text == "assistant> <th\n"


def test_the_prompt_decides_whether_a_block_is_open(shared_embedded_backend):
    # The embedded template opens <think> when asked to think, and not otherwise.
    on = {ModelOption.THINKING: True, ModelOption.MAX_NEW_TOKENS: 8}
    off = {ModelOption.THINKING: False, ModelOption.MAX_NEW_TOKENS: 8}
    assert prompt_opens_thinking(shared_embedded_backend, ChatContext(), "Hi.", on) is True
    assert prompt_opens_thinking(shared_embedded_backend, ChatContext(), "Hi.", off) is False
    assert prompt_opens_thinking(object(), ChatContext(), "Hi.", on) is False  # cannot render
