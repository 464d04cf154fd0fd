"""The tool-call grammar (parsing.tool_grammar) on the embedded tokenizer: what it accepts and
refuses, schemas with numbers, enums, dates and nested objects, and the exactness rule on the
real tiny model: under the grammar, greedy decoding writes the same tokens as without it for as
long as the unconstrained output stays inside the grammar."""

from __future__ import annotations

import copy
import functools
from typing import Literal

import pydantic
import pytest
import torch
from llguidance import LLMatcher

from mellea_local.errors import ConstrainedDecodingError
from mellea_local.options import ModelOption
from mellea_local.parsing.tool_grammar import constrain_tool_calls, tool_call_grammar
from mellea_local.react.components import finalizer_tool
from mellea_local.tools import MelleaTool, calculator


class Address(pydantic.BaseModel):
    city: str
    zip_code: int


def book_room(guest: str, nights: int, date: str, kind: Literal["single", "double"],
              address: Address, rate: float = 1.0) -> str:
    """Book a room.

    Args:
        guest: Who stays.
        nights: How many nights.
        date: Arrival, YYYY-MM-DD.
        kind: Room kind.
        address: Billing address.
        rate: Price factor.
    """
    return "ok"


SPECS = [calculator.as_json_tool, MelleaTool.from_callable(book_room).as_json_tool,
         finalizer_tool().as_json_tool]


@functools.cache
def _lltok(tok):
    import llguidance.hf

    return llguidance.hf.from_tokenizer(tok)


def accepts(tok, grammar: str, text: str) -> bool:
    matcher = LLMatcher(_lltok(tok), grammar)
    ids = tok.encode(text, add_special_tokens=False)
    return all(matcher.consume_token(i) for i in ids) and matcher.is_accepting()


@pytest.fixture(scope="module")
def grammar(tiny_tokenizer):
    return tool_call_grammar(SPECS, tokenizer=tiny_tokenizer)


GOOD = [
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 * 7"}}\n</tool_call>',
    '<think>\nI need the product.\n</think>\n<tool_call>{"name":"final_answer","arguments":'
    '{"answer": "84"}}</tool_call>',
    '<tool_call>\n{"name": "book_room", "arguments": {"guest": "Ann", "nights": 2, "date": '
    '"2025-01-03", "kind": "double", "address": {"city": "Oslo", "zip_code": 150}}}\n'
    '</tool_call>',
]
BAD = [
    '<tool_call>\n{"name": "calculate", "arguments": {"expression": "1"}}\n</tool_call>',
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": 12}}\n</tool_call>',
    '<tool_call>\n{"arguments": {"expression": "1"}, "name": "calculator"}\n</tool_call>',
    '<tool_call>\n{"name": "book_room", "arguments": {"guest": "Ann", "nights": "two", "date":'
    ' "2025-01-03", "kind": "double", "address": {"city": "Oslo", "zip_code": 150}}}\n'
    '</tool_call>',
    '<tool_call>\n{"name": "book_room", "arguments": {"guest": "Ann", "nights": 2, "date": '
    '"2025-01-03", "kind": "suite", "address": {"city": "Oslo", "zip_code": 150}}}\n'
    '</tool_call>',
    "The answer is 84.",
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1"}}\n</tool_call>'
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2"}}\n</tool_call>',
]


@pytest.mark.parametrize("text", GOOD)
def test_valid_calls_are_accepted(tiny_tokenizer, grammar, text):
    assert accepts(tiny_tokenizer, grammar, text)


@pytest.mark.parametrize("text", BAD)
def test_unknown_tools_wrong_types_and_extra_calls_are_refused(tiny_tokenizer, grammar, text):
    assert not accepts(tiny_tokenizer, grammar, text)


def test_tags_are_the_tokenizer_s_own_tokens_when_it_has_them(tiny_tokenizer):
    assert "<[4094]>" in tool_call_grammar(SPECS, tokenizer=tiny_tokenizer)
    assert '"<tool_call>"' in tool_call_grammar(SPECS)


def test_thinking_modes(tiny_tokenizer):
    none = tool_call_grammar(SPECS, tokenizer=tiny_tokenizer, thinking="none")
    assert not accepts(tiny_tokenizer, none, GOOD[1])
    opened = tool_call_grammar(SPECS, tokenizer=tiny_tokenizer, thinking="open")
    assert accepts(tiny_tokenizer, opened, GOOD[1][len("<think>"):])
    with pytest.raises(ConstrainedDecodingError, match="thinking"):
        tool_call_grammar(SPECS, thinking="maybe")


def test_a_schema_llguidance_cannot_compile_is_a_typed_error_naming_the_tool():
    bad = {"type": "function", "function": {"name": "odd", "parameters": {
        "type": "object", "properties": {"x": {"type": "strig"}}}}}
    with pytest.raises(ConstrainedDecodingError, match=r"'odd'.*CONSTRAIN_TOOL_CALLS"):
        tool_call_grammar([bad])
    with pytest.raises(ConstrainedDecodingError, match="at least one tool"):
        tool_call_grammar([])


def test_on_by_default_exactly_for_a_template_without_a_tool_slot(tiny_tokenizer):
    plain = copy.deepcopy(tiny_tokenizer)
    plain.chat_template = ("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert not constrain_tool_calls({}, tiny_tokenizer)
    assert constrain_tool_calls({}, plain)
    assert constrain_tool_calls({ModelOption.CONSTRAIN_TOOL_CALLS: True}, tiny_tokenizer)
    assert not constrain_tool_calls({ModelOption.CONSTRAIN_TOOL_CALLS: False}, plain)


def greedy_prefix_agrees(backend, prompt_ids, grammar, max_new_tokens) -> tuple[list, list]:
    """(unconstrained ids, constrained ids) of one greedy generation each."""
    from mellea_local.backends.constrained import GrammarLogitsProcessor

    model, tok = backend.model, backend.tokenizer
    ids = torch.tensor([prompt_ids])
    vocab = model.get_output_embeddings().weight.shape[0]
    with torch.no_grad():
        free = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id)
        held = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                              logits_processor=[GrammarLogitsProcessor(
                                  tok, grammar, vocab, len(prompt_ids))])
    return free[0, len(prompt_ids):].tolist(), held[0, len(prompt_ids):].tolist()


def inside_grammar_prefix(tok, grammar, new_ids) -> int:
    """How many of ``new_ids`` the grammar accepts in a row (EOS counts when accepting)."""
    matcher = LLMatcher(_lltok(tok), grammar)
    for n, token in enumerate(new_ids):
        if token == tok.eos_token_id and matcher.is_accepting():
            return n + 1
        if matcher.is_stopped() or not matcher.consume_token(token):
            return n
    return len(new_ids)


def test_exactness_on_the_trained_tiny_model(shared_embedded_backend):
    """The embedded model writes valid calls unconstrained: the grammar changes nothing.
    Where its output leaves the grammar, both agree up to that token."""
    from mellea_local.core.context import ChatContext
    from mellea_local.react.components import ReactInitiator

    backend = shared_embedded_backend
    torch.set_num_threads(1)
    goals = ["What is 12 * 7?", "What is (3 + 4) * 5?", "What is the capital of France?"]
    whole = 0
    for goal in goals:
        init = ReactInitiator(goal, [calculator])
        ids, tools, _ = backend.render(init, ChatContext(), tool_calls=True)
        grammar = tool_call_grammar([s for _, s in tools.values()],
                                    tokenizer=backend.tokenizer)
        free, held = greedy_prefix_agrees(backend, ids, grammar, 48)
        n = inside_grammar_prefix(backend.tokenizer, grammar, free)
        assert held[:n] == free[:n], goal
        if n == len(free):
            whole += 1
            assert held == free, goal
    assert whole == 2  # the calculator goals: the model's own call satisfies the grammar;
    # the third calls a `lookup` tool it was trained on but is not offered here



_LOG_SPEC = {"type": "function", "function": {"name": "log_entry", "description": "Log.",
        "parameters": {"type": "object", "properties": {
            "note": {"type": "string"}, "amount": {"type": "number"},
            "count": {"type": "integer"}, "tags": {"type": "array",
                                                   "items": {"type": "string"}},
            "code": {"type": "string", "maxLength": 4}},
            "required": ["note", "amount", "count", "tags", "code"]}}}


def _runaway_decode(tokenizer, grammar, steps, **closing):
    """Greedy decoding under ``grammar`` by an adversary that prefers to write on: letter and
    digit tokens score high, closing quotes, brackets, tags and EOS low. Returns the text and
    whether the grammar ended (only EOS allowed) within ``steps`` tokens."""
    from mellea_local.backends.constrained import GrammarLogitsProcessor

    vocab = len(tokenizer)
    prefer = torch.zeros(1, vocab)
    for token_id in range(vocab):
        text = tokenizer.decode([token_id])
        prefer[0, token_id] = (2.0 if text.strip().isalnum() else
                               -5.0 if any(c in text for c in "\"}]<>") else 0.0)
    prefer[0, tokenizer.eos_token_id] = -10.0
    processor = GrammarLogitsProcessor(tokenizer, grammar, vocab, 0, **closing)
    ids: list[int] = []
    for _ in range(steps):
        scores = processor(torch.tensor([ids], dtype=torch.long).reshape(1, -1), prefer.clone())
        token = int(scores[0].argmax())
        if token == tokenizer.eos_token_id:
            return tokenizer.decode(ids), True
        ids.append(token)
    return tokenizer.decode(ids), False


def test_every_value_is_bounded_so_a_call_cannot_run_on_to_the_token_limit(tiny_tokenizer):
    """Strings, numbers, integers and arrays without bounds of their own get them: an
    adversary that always writes on still closes the call, well inside a step's budget, and
    the call it wrote parses as a valid call; without the bounds it never ends. Bounds a
    schema sets itself are kept."""
    from mellea_local.parsing.tool_grammar import MAX_STRING_CHARS, _arguments_schema

    spec = copy.deepcopy(_LOG_SPEC)
    schema = _arguments_schema(spec)["properties"]
    assert schema["note"]["maxLength"] == MAX_STRING_CHARS and schema["code"]["maxLength"] == 4
    assert schema["amount"]["multipleOf"] == 1e-6 and "multipleOf" not in schema["count"]
    grammar = tool_call_grammar([spec], tokenizer=tiny_tokenizer, thinking="none")
    # At most 120 + 23 + 17 + 16 * 122 + 4 characters of values: one token each, at worst.
    text, ended = _runaway_decode(tiny_tokenizer, grammar, 2400)
    assert ended, text[-200:]
    start = text.index("{")
    import json

    call = json.loads(text[start: text.rindex("}") + 1])
    assert call["name"] == "log_entry" and set(call["arguments"]) == set(schema)
    assert len(call["arguments"]["note"]) <= MAX_STRING_CHARS
    assert abs(call["arguments"]["amount"]) <= 1e15

    unbounded = _closed_off(spec, tiny_tokenizer)
    assert not _runaway_decode(tiny_tokenizer, unbounded, 2400)[1]  # the adversary is real


@pytest.mark.parametrize("budget", [48, 64, 96, 160])
def test_the_closing_mode_ends_every_call_within_the_token_budget(tiny_tokenizer, budget):
    """With the step's budget, the decoder keeps ``closing_reserve`` tokens for closing:
    from there only quotes, braces, brackets, closing tags, commas and EOS stay allowed where
    the grammar allows one. The adversary (thinking first, then writing on in every value)
    still ends its call, EOS included, within max_new_tokens, and the call is valid."""
    import json

    from mellea_local.parsing.tool_grammar import closing_reserve

    specs = [_LOG_SPEC, finalizer_tool().as_json_tool]
    grammar = tool_call_grammar(specs, tokenizer=tiny_tokenizer, thinking="optional")
    text, ended = _runaway_decode(tiny_tokenizer, grammar, budget, budget=budget,
                                  reserve=closing_reserve(specs, tiny_tokenizer))
    assert ended, text
    call = json.loads(text[text.index("{"): text.rindex("}") + 1])
    assert call["name"] in ("log_entry", "final_answer")
    assert not _runaway_decode(tiny_tokenizer, grammar, budget)[1]  # without it: cut off


def _closed_off(spec, tokenizer):
    """The same call's grammar with the bounds taken off again (what the grammar was)."""
    import mellea_local.parsing.tool_grammar as tg

    saved = tg._bounded
    tg._bounded = lambda node: node
    try:
        tg._grammar.cache_clear()
        return tool_call_grammar([spec], tokenizer=tokenizer, thinking="none")
    finally:
        tg._bounded = saved
        tg._grammar.cache_clear()


def test_the_closing_mode_knows_when_a_call_is_inside_a_string():
    """Inside a JSON string a brace or bracket is content: only the quote closes it (a real
    SmolLM2 run filled `"answer": "]]}}}}` to the limit when braces counted as closers)."""
    from mellea_local.backends.constrained import _inside_json_string

    assert _inside_json_string('{"name": "final_answer", "arguments": {"answer": "]]}}')
    assert not _inside_json_string('{"name": "final_answer", "arguments": {"answer": "84"')
    assert _inside_json_string('{"a": "say \\"hi')  # an escaped quote does not close it
    assert not _inside_json_string('{"a": "x\\\\"')  # an escaped backslash, then the quote
