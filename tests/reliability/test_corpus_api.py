"""Bad input through the Python API: each case ends in a typed error naming the input, or is
accepted because it is valid (and then gives a sane result). Never a raw builtin error, a hang
or a silently wrong result.

Kinds: messages and their fields, text that is not plain (control characters, lone surrogates,
bidi marks), model options, requirement entry points, score JSON, tools and tool calls,
contexts and compactors, the ReACT loop, intrinsic calls and ``generate_from_context``
arguments. The adapter, io.yaml and command-line corpora live beside this file.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from mellea_local import (
    ALoraRequirement,
    ChatContext,
    MelleaTool,
    Message,
    ModelOption,
    Requirement,
    WindowCompactor,
    aintrinsic,
    arequirement_checks,
    avalidate,
    react,
    requirement_check_score,
    requirement_check_to_bool,
)
from mellea_local.errors import MelleaLocalError

SHORT = {ModelOption.MAX_NEW_TOKENS: 3}


@dataclass(frozen=True)
class Case:
    """``run(backend, conversation)`` and what must come of it.

    ``error`` is the typed error class expected and ``words`` what its message must contain
    (the input it names); ``error=None`` means the input is valid: ``valid`` checks the result.
    """

    run: Callable[[Any, Any], Any]
    error: type[BaseException] | None = MelleaLocalError
    words: tuple[str, ...] = ()
    valid: Callable[[Any], bool] = lambda result: True


def _gen(content: str, **kwargs: Any) -> Callable[[Any, Any], Any]:
    async def go(backend: Any, conv: Any) -> str:
        mot, _ = await backend.generate_from_context(Message("user", content), ChatContext(),
                                                     **kwargs)
        return await mot.avalue()
    return go


def _opts(options: Any) -> Callable[[Any, Any], Any]:
    return _gen("What is 2 + 2?", model_options=options)


def _checks(reqs: Any) -> Callable[[Any, Any], Any]:
    return lambda backend, conv: arequirement_checks(conv, backend, reqs)


def _double(x: int) -> int:
    """Double a number.

    Args:
        x: the number
    """
    return 2 * x


def _scores(result: Any) -> bool:
    return isinstance(result, list) and all(0.0 <= s <= 1.0 for s in result)


def _text(result: Any) -> bool:
    return isinstance(result, str)


CASES: dict[str, Case] = {}

# Messages and their fields.
for args, words in [((None, "x"), "role"), (("", "x"), "role"), (("USER", "x"), "role"),
                    ((" user", "x"), "role"), (("function", "x"), "role"),
                    (("developer", "x"), "role"), (("user", None), "content"),
                    (("user", 7), "content"), (("user", 3.5), "content"),
                    (("user", b"hi"), "content"), (("user", ["a"]), "content"),
                    (("user", {"a": 1}), "content")]:
    CASES[f"Message{args!r}"] = Case(lambda b, c, a=args: Message(*a), words=(words,))
for field_kw, words in [({"images": "abc"}, "images"), ({"images": [123]}, "images"),
                        ({"documents": [123]}, "documents"), ({"documents": 5}, "documents"),
                        ({"tool_calls": "x"}, "tool_calls"), ({"tool_calls": [1]}, "tool_calls"),
                        ({"thinking": 5}, "thinking"), ({"tool_call_id": 5}, "tool_call_id"),
                        ({"audio": ["x"]}, "audio")]:
    CASES[f"Message field {field_kw!r}"] = Case(
        lambda b, c, k=field_kw: Message("assistant", "x", **k), words=(words,))

# Text that is unusual but valid is generated from; text that is not Unicode is refused.
for text in ["\x00", "\x1b[31mred\x1b[0m", "\u202eevil\u202c", "e\u0301", "😀" * 3, "\r\n\r\n",
             "\ufeffhi", "\uffff", "tab\there", "\u200b\u200d", "ﷺ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
             "<|end_of_text|>", "{{ messages }}", "{% raw %}", "</s><s>", "\\u0000"]:
    CASES[f"generate text {text!r}"] = Case(_gen(text, model_options=SHORT), error=None,
                                            valid=_text)
for text in ["\ud800", "a\udfffb", "ok \udc80 bytes"]:
    CASES[f"generate text {text!r}"] = Case(_gen(text, model_options=SHORT),
                                            words=("lone surrogate", "messages[0].content"))
CASES["requirement with a lone surrogate"] = Case(_checks(["ok \ud834"]),
                                                  words=("lone surrogate",))
CASES["prompt past the model's positions"] = Case(_gen("word " * 9000, model_options=SHORT),
                                                  words=("tokens",))

# Model options.
for options, words in [
        ({ModelOption.TEMPERATURE: "0.5"}, "temperature"),
        ({ModelOption.TEMPERATURE: float("nan")}, "temperature"),
        ({ModelOption.TEMPERATURE: float("inf")}, "temperature"),
        ({ModelOption.TEMPERATURE: -1}, "temperature"),
        ({ModelOption.MAX_NEW_TOKENS: 0}, "MAX_NEW_TOKENS"),
        ({ModelOption.MAX_NEW_TOKENS: -5}, "MAX_NEW_TOKENS"),
        ({ModelOption.MAX_NEW_TOKENS: 10.0}, "MAX_NEW_TOKENS"),
        ({ModelOption.MAX_NEW_TOKENS: True}, "MAX_NEW_TOKENS"),
        ({ModelOption.MAX_NEW_TOKENS: "5"}, "MAX_NEW_TOKENS"),
        ({ModelOption.MAX_NEW_TOKENS: 10**9}, "MAX_NEW_TOKENS"),
        ({ModelOption.SEED: 1.5}, "SEED"),
        ({ModelOption.SEED: "7"}, "SEED"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({ModelOption.STOP_SEQUENCES: 5}, "STOP_SEQUENCES"),
        ({ModelOption.STOP_SEQUENCES: [1]}, "STOP_SEQUENCES"),
        ({ModelOption.STOP_SEQUENCES: [""]}, "STOP_SEQUENCES"),
        ({ModelOption.SYSTEM_PROMPT: 5}, "SYSTEM_PROMPT"),
        ({ModelOption.TOOLS: 5}, "TOOLS"),
        ({ModelOption.TOOLS: "calculator"}, "TOOLS"),
        ({"temprature": 0.7}, "did you mean 'temperature'"),
        ({"max_tokens_new": 5}, "max_tokens_new"),
        ({None: 1}, "keys are str"),
        ({3: 1}, "keys are str"),
        ([("temperature", 0)], "model_options must be a dict"),
        ("temperature=0", "model_options must be a dict")]:
    CASES[f"model_options {options!r}"] = Case(_opts(options), words=(words,))
for options in [{ModelOption.TEMPERATURE: 0}, {ModelOption.TEMPERATURE: -0.0},
                {ModelOption.SEED: -1, ModelOption.MAX_NEW_TOKENS: 4}, {"stop": "."},
                {ModelOption.MAX_NEW_TOKENS: 4, "repetition_penalty": 1.1},
                {ModelOption.STOP_SEQUENCES: None, ModelOption.MAX_NEW_TOKENS: 2}]:
    CASES[f"valid model_options {options!r}"] = Case(_opts(options), error=None, valid=_text)

# Requirement entry points.
for reqs, words in [(None, "requirements"), (123, "requirements"), ("", "requirements"),
                    ("one requirement", "wrap it in a list"), ([None], "requirements[0]"),
                    ([""], "requirements[0]"), ([" \n\t"], "requirements[0]"),
                    (["ok", 5], "requirements[1]"), ([b"x"], "requirements[0]"),
                    ({"a": 1}, "requirements"), (b"abc", "requirements"),
                    ([Requirement(None)], "requirements[0]")]:
    CASES[f"requirement checks {reqs!r}"] = Case(_checks(reqs), words=(words,))
for reqs in [("The response has a number.",), {"The response has a number."},
             (r for r in ["The response has a number."]), [], ["x" * 3]]:
    CASES[f"valid requirement checks {type(reqs).__name__}"] = Case(_checks(reqs), error=None,
                                                                    valid=_scores)
CASES["checks, context None"] = Case(
    lambda b, c: arequirement_checks(None, b, ["ok"]), words=("Context",))
CASES["checks, backend None"] = Case(
    lambda b, c: arequirement_checks(c, None, ["ok"]), words=("backend",))
CASES["checks, empty context"] = Case(
    lambda b, c: arequirement_checks(ChatContext(), b, ["ok"]), words=("conversation",))
CASES["checks, no such adapter"] = Case(
    lambda b, c: arequirement_checks(c, b, ["ok"], adapter="nope"), words=("nope",))
CASES["validate, requirements None"] = Case(lambda b, c: avalidate(None, c, b),
                                            words=("reqs",))
CASES["validate, a number"] = Case(lambda b, c: avalidate([5], c, b), words=("reqs[0]",))
CASES["ALoraRequirement(5)"] = Case(lambda b, c: ALoraRequirement(5), words=("description",))

# Score JSON, as an adapter might emit it.
for text in ["", "null", "{}", "[1]", "Infinity", "\ud800", '{"requirement_check": {}}',
             '{"requirement_check": [0.5]}', '{"requirement_check": {"score": "0.7"}}',
             '{"requirement_check": {"score": NaN}}', '{"requirement_check": {"score": 1.5}}',
             '{"requirement_check": {"score": -0.1}}', '{"requirement_check": {"score": true}}',
             '{"requirement_check": {"score": 1e999}}', '{"score": 0.7}', "{'a': 1}",
             '{"requirement_check": {"score": 0.7}', None, 0.7, b"{}"]:
    CASES[f"score_to_bool {text!r}"] = Case(lambda b, c, t=text: requirement_check_to_bool(t))
    CASES[f"score {text!r}"] = Case(lambda b, c, t=text: requirement_check_score(t))
for text, want in [('{"requirement_check": {"score": 0.7}}', 0.7),
                   ('{"requirement_check": {"score": 0}}', 0.0),
                   (' {"requirement_check": {"score": 1.0}}\n', 1.0),
                   ('{"requirement_check": {"score": 0.7}, "extra": 1}', 0.7)]:
    CASES[f"valid score {text!r}"] = Case(lambda b, c, t=text: requirement_check_score(t),
                                          error=None, valid=lambda r, w=want: math.isclose(r, w))

# Tools and tool calls.
for fn in [None, 5, "len", [_double]]:
    CASES[f"MelleaTool.from_callable({fn!r})"] = Case(
        lambda b, c, f=fn: MelleaTool.from_callable(f))
for args, kwargs, words in [((), {}, "x: missing"), (("a",), {}, "x: Input should be"),
                            ((), {"x": "3"}, "x: Input should be"),
                            ((), {"x": 1, "y": 2}, "y: unexpected"),
                            ((), {"x": None}, "x: Input should be"),
                            ((), {"x": True}, "x: Input should be"),
                            ((1, 2), {}, "positional")]:
    # The agent loop's contract: invalid arguments never reach the function; the text that
    # names them is what the model reads as the observation.
    CASES[f"tool.run{args}{kwargs}"] = Case(
        lambda b, c, a=args, k=kwargs: MelleaTool.from_callable(_double).run(*a, **k),
        error=None, valid=lambda r, w=words: isinstance(r, str) and w in r)
CASES["tool.run valid"] = Case(lambda b, c: MelleaTool.from_callable(_double).run(x=4),
                               error=None, valid=lambda r: r == 8)

# Contexts, compactors, the ReACT loop.
for size in [-1, "3", 2.5, None, True]:
    CASES[f"ChatContext(window_size={size!r})"] = Case(
        lambda b, c, s=size: ChatContext(window_size=s).add(Message("user", "x")),
        error=None if size is None else MelleaLocalError,
        words=() if size is None else ("size",))
CASES["WindowCompactor(size='2')"] = Case(lambda b, c: WindowCompactor(size="2"),
                                          words=("size",))
CASES["ChatContext(compactor=5)"] = Case(lambda b, c: ChatContext(compactor=5),
                                         words=("compactor",))
CASES["context.add(None)"] = Case(lambda b, c: ChatContext().add(None))
CASES["context.add('bare text')"] = Case(lambda b, c: ChatContext().add("bare text"))
for goal in [None, "", 5]:
    CASES[f"react goal {goal!r}"] = Case(
        lambda b, c, g=goal: react(g, ChatContext(), b, tools=[], loop_budget=1),
        words=("goal",))
for budget in ["3", 2.5, -2]:
    CASES[f"react loop_budget {budget!r}"] = Case(
        lambda b, c, n=budget: react("x", ChatContext(), b, tools=[], loop_budget=n),
        words=("loop_budget",))
CASES["react tools not a list"] = Case(
    lambda b, c: react("x", ChatContext(), b, tools=_double, loop_budget=1), words=("tools",))
CASES["react tools [5]"] = Case(
    lambda b, c: react("x", ChatContext(), b, tools=[5], loop_budget=1), words=("int",))
CASES["react context not chat"] = Case(
    lambda b, c: react("x", "ctx", b, tools=[], loop_budget=1), words=("ChatContext",))

# Intrinsic calls.
RC = "requirement-check"
for name, call, words in [
        ("unknown name", lambda b, c: aintrinsic(b, "no-such", c), ("no-such",)),
        ("name None", lambda b, c: aintrinsic(b, None, c), ("name",)),
        ("context a str", lambda b, c: aintrinsic(b, RC, "ctx", requirement="x"), ("Context",)),
        ("missing variable", lambda b, c: aintrinsic(b, RC, c), ("requirement=",)),
        ("extra variable", lambda b, c: aintrinsic(b, RC, c, requirement="x", bogus=1),
         ("bogus",)),
        ("variable not text", lambda b, c: aintrinsic(b, RC, c, requirement=5),
         ("requirement=5",)),
        ("backend not a runner", lambda b, c: aintrinsic(object(), RC, c, requirement="x"),
         ("AdapterRunner",)),
        ("unknown scoring option", lambda b, c: aintrinsic(
            b, RC, c, requirement="x", model_options={"temprature": 1}), ("temprature",))]:
    CASES[f"intrinsic {name}"] = Case(call, words=words)

# generate_from_context and backend calls.
for name, call, words in [
        ("action None, empty context",
         lambda b, c: b.generate_from_context(None, ChatContext()), ("Nothing to generate",)),
        ("format=5", lambda b, c: b.generate_from_context(
            Message("user", "hi"), ChatContext(), format=5), ("format",)),
        ("format=dict", lambda b, c: b.generate_from_context(
            Message("user", "hi"), ChatContext(), format={"type": "object"}), ("format",)),
        ("ctx a list", lambda b, c: b.generate_from_context(
            Message("user", "hi"), [Message("user", "x")]), ("ctx",)),
        ("add_adapter(None)", lambda b, c: b.add_adapter(None), ()),
        ("add_adapter(5)", lambda b, c: b.add_adapter(5), ()),
        ("add_adapter(missing folder)", lambda b, c: b.add_adapter("/nonexistent/adapter"),
         ("/nonexistent/adapter",)),
        ("unload_adapter('nope')", lambda b, c: b.unload_adapter("nope"), ("nope",))]:
    CASES[f"backend {name}"] = Case(call, words=words)


def _outcome(case: Case, backend: Any, conv: Any) -> Any:
    result = case.run(backend, conv)
    if asyncio.iscoroutine(result):
        result = asyncio.run(asyncio.wait_for(result, timeout=120))
    return result


@pytest.fixture(scope="module")
def conversation():
    return (ChatContext().add(Message("user", "What is 2 + 2?"))
            .add(Message("assistant", "2 + 2 = 4.")))


@pytest.mark.parametrize("name", list(CASES))
def test_bad_api_input(name, shared_embedded_backend, conversation):
    case = CASES[name]
    if case.error is None:
        assert case.valid(_outcome(case, shared_embedded_backend, conversation)), name
    else:
        with pytest.raises(case.error) as caught:
            _outcome(case, shared_embedded_backend, conversation)
        for word in case.words:
            assert word in str(caught.value), (name, str(caught.value))
    # Whatever happened, the backend is still usable and holds no adapter active.
    assert shared_embedded_backend.engine.holder.active_adapter is None


def test_the_backend_is_exact_after_the_corpus(shared_embedded_backend, conversation):
    """A greedy answer after every bad call equals the one before them (no state leaked)."""
    before = _outcome(Case(_gen("What is 2 + 2?")), shared_embedded_backend, conversation)
    for case in list(CASES.values())[:40]:
        with contextlib.suppress(MelleaLocalError):
            _outcome(case, shared_embedded_backend, conversation)
    assert _outcome(Case(_gen("What is 2 + 2?")), shared_embedded_backend,
                    conversation) == before


def test_the_api_corpus_is_big_enough():
    assert len(CASES) >= 150
