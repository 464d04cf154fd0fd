"""The built-in calculator and lookup tools."""

from __future__ import annotations

import operator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mellea_local.embedded.corpus import TOOL_SPECS
from mellea_local.errors import ToolError
from mellea_local.react import finalizer_tool
from mellea_local.tools import calculator, evaluate_integer_expression, lookup_tool
from mellea_local.tools.builtin import MAX_EXPRESSION_CHARS, MAX_INTEGER_BITS

CORPUS_SPECS = {spec["name"]: spec for spec in TOOL_SPECS}


def test_specs_are_the_embedded_models_training_specs():
    # The trained embedded model learned these exact specs; any drift changes its prompt.
    assert calculator.as_json_tool["function"] == CORPUS_SPECS["calculator"]
    assert lookup_tool({"a": 1}).as_json_tool["function"] == CORPUS_SPECS["lookup"]
    assert finalizer_tool().as_json_tool["function"] == CORPUS_SPECS["final_answer"]


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("3 * (4 + 5)", 27),
        ("  -7 // 2 ", -4),
        ("-7 % 3", 2),
        ("2 ** 10 - 1", 1023),
        ("12 / 4", 3),
        ("+5 - -5", 10),
        ("1_000 * 3", 3000),
        ("2 ** 255", 2**255),
    ],
)
def test_integer_arithmetic(expression, value):
    assert evaluate_integer_expression(expression) == value
    assert calculator.run(expression=expression) == value


_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
        "%": operator.mod}


@given(
    st.integers(-10**6, 10**6),
    st.sampled_from(sorted(_OPS)),
    st.integers(-10**6, 10**6),
    st.integers(-10**3, 10**3),
)
def test_matches_python_integer_semantics(a, op, b, c):
    if op in ("//", "%") and b == 0:
        with pytest.raises(ToolError, match="by zero"):
            evaluate_integer_expression(f"{a} {op} {b}")
        return
    expected = _OPS[op](a, b) * c
    assert evaluate_integer_expression(f"({a} {op} ({b})) * ({c})") == expected


@pytest.mark.parametrize(
    ("expression", "match"),
    [
        ("__import__('os').system('true')", "does not understand"),
        ("x + 1", "does not understand"),
        ("(1).bit_length()", "does not understand"),
        ("1.5 * 2", "integers only"),
        ("'a' * 3", "integers only"),
        ("True + True", "integers only"),
        ("1 < 2", "does not understand"),
        ("1 << 3", "does not understand"),
        ("not 1", "does not understand"),
        ("[1, 2]", "does not understand"),
        ("lambda: 1", "does not understand"),
        ("7 / 2", "not a whole number"),
        ("1 / 0", "by zero"),
        ("2 ** -1", "exponents >= 0"),
        ("9 ** 9 ** 9", "too large"),
        ("2 ** 256 * 2 ** 256", "too large|below 2\\*\\*256"),
        ("10 ** 70 * 10 ** 70", "below 2\\*\\*256"),
        ("1 +", "not a valid arithmetic expression"),
        ("", "empty"),
        ("1" * (MAX_EXPRESSION_CHARS + 1), "characters long"),
        ("+".join(["1"] * 60), "too many parts"),
        ("1\x00", "not a valid"),
    ],
)
def test_everything_else_is_refused_with_a_reason(expression, match):
    with pytest.raises(ToolError, match=match):
        evaluate_integer_expression(expression)


def test_huge_literals_are_refused():
    with pytest.raises(ToolError, match=f"below 2\\*\\*{MAX_INTEGER_BITS}"):
        evaluate_integer_expression(str(2 ** (MAX_INTEGER_BITS + 1)))


def test_calculator_rejects_a_non_string_argument_before_running():
    assert "expression: Input should be a valid string" in calculator.run(expression=12)


def test_lookup_exact_then_case_insensitive_then_a_helpful_error():
    table = {"Paris": "France", "rome": "Italy", "ROME ": "duplicate-ish"}
    t = lookup_tool(table)
    assert t.name == "lookup"
    assert t.run(key="Paris") == "France"
    assert t.run(key="paris") == "France"
    assert t.run(key="rome") == "Italy"
    with pytest.raises(ToolError, match="No value is stored under the key 'Rome'"):
        t.run(key="Rome")  # two case-insensitive matches: ambiguous
    with pytest.raises(ToolError, match="Known keys: 'Paris', 'rome'"):
        t.run(key="Oslo")


def test_lookup_copies_its_table_and_lists_only_some_keys():
    table = {f"k{i}": i for i in range(25)}
    t = lookup_tool(table, name="kv")
    table["k0"] = "changed"
    assert t.name == "kv" and t.run(key="k0") == 0
    with pytest.raises(ToolError, match="and 15 more"):
        t.run(key="missing")


def test_lookup_keys_must_be_strings():
    with pytest.raises(ToolError, match="strings"):
        lookup_tool({1: "one"})
