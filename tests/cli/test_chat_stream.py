"""``mellea-local chat`` on the real embedded model: a banner naming the model and adapters,
answers streamed as they are generated, and Ctrl-C stopping an answer, not the chat."""

from __future__ import annotations

import signal

import pytest
from rich.console import Console

from mellea_local.cli.chat import StreamPrinter, banner, run_chat

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def embedded():
    from mellea_local.backends.huggingface import LocalHFBackend

    return LocalHFBackend.embedded()


class Recording(Console):
    """A console that keeps each print call's text, and can act on the n-th one."""

    def __init__(self) -> None:
        super().__init__(record=True, width=200)
        self.calls: list[str] = []
        self.on_call = None

    def print(self, *objects, **kwargs):  # type: ignore[override]
        self.calls.append("".join(str(o) for o in objects))
        if self.on_call is not None:
            self.on_call(len(self.calls))
        super().print(*objects, **kwargs)


def _whole(backend, question: str) -> str:
    import asyncio

    from mellea_local.core.context import ChatContext
    from mellea_local.messages import Message
    from mellea_local.options import ModelOption

    async def run():
        mot, _ = await backend.generate_from_context(
            Message("user", question), ChatContext(),
            model_options={ModelOption.MAX_NEW_TOKENS: 40, ModelOption.THINKING: True})
        return await mot.avalue()

    return asyncio.run(run())


def _inputs(monkeypatch, lines):
    feed = iter(lines)

    def fake_input(_prompt=""):
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)


def test_banner_names_the_model_device_and_adapters(embedded):
    text = banner(embedded)
    assert embedded.model_id in text and "cpu" in text
    for name in embedded.adapters:
        assert name in text
    assert "Ctrl-C stops an answer" in text


def test_answers_stream_thinking_then_answer(embedded, monkeypatch):
    _inputs(monkeypatch, [QUESTION])
    console = Recording()
    assert run_chat(embedded, console=console, max_new_tokens=40) == 1
    text = console.export_text()
    assert text.startswith(banner(embedded).splitlines()[0])
    assert text.count("assistant> ") == 1 and "</think>" not in text
    answer_prints = console.calls[console.calls.index("assistant> ") + 1:]
    assert len(answer_prints) > 2  # the answer arrived in pieces, printed as they came
    # What streamed is what the model answers to the same question, not streamed.
    assert "assistant> " + _whole(embedded, QUESTION) in text


@pytest.fixture
def default_sigint():
    """A terminal's SIGINT reaches Python's default handler, as in a fresh `mellea-local chat`;
    a library an earlier test started in this process may have replaced it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("how", ["signal", "raise"])
def test_ctrl_c_stops_the_answer_and_the_chat_goes_on(embedded, monkeypatch, how,
                                                     default_sigint):
    _inputs(monkeypatch, [QUESTION, "And of Italy?"])
    console = Recording()
    stop_at = len(banner(embedded).splitlines()) + 3  # a few deltas into the first answer

    def interrupt(n):
        if n == stop_at:
            console.on_call = None
            if how == "signal":  # what the terminal sends: asyncio cancels the answer's task
                signal.raise_signal(signal.SIGINT)
            else:
                raise KeyboardInterrupt

    console.on_call = interrupt
    assert run_chat(embedded, console=console, max_new_tokens=40) == 1
    text = console.export_text()
    assert text.count("(answer stopped)") == 1
    assert text.count("assistant> ") == 1 and text.index("(answer stopped)") < text.index(
        "assistant> ")
    # The backend is free, and the stopped turn left no trace: the second question answers
    # exactly as it does in a fresh conversation.
    assert "assistant> " + _whole(embedded, "And of Italy?") in text


def test_a_marker_split_across_deltas_is_held_until_whole():
    console = Console(record=True, width=200)
    printer = StreamPrinter(console, thinking=True)
    for delta in ["Think", "ing.</", "thi", "nk>Ans", "wer."]:
        printer.feed(delta)
    printer.finish(type("Done", (), {"value": "Answer.", "thinking": "Thinking."})())
    assert console.export_text() == "Thinking.\nassistant> Answer.\n"
