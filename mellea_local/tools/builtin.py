"""Built-in tools for the demo and the tests: an integer calculator and a key/value lookup.

Their specs are exactly the embedded model family's training specs
(``mellea_local.embedded.corpus.TOOL_SPECS``), so the trained model sees the tools it learned.

The calculator never calls ``eval``: it parses with ``ast`` and walks an allowlist of nodes
(integers, parentheses, unary +/-, and + - * / // % **). Sizes are bounded everywhere a model
could make it spin: the expression's length, its number of nodes, every integer's size and the
exponent (checked before the power is computed, since ``9**9**9`` would never finish).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any

from mellea_local.errors import ToolError
from mellea_local.tools.tool import MelleaTool

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "MAX_INTEGER_BITS",
    "MAX_NODES",
    "calculator",
    "evaluate_integer_expression",
    "lookup_tool",
]

MAX_EXPRESSION_CHARS = 200
MAX_NODES = 100
MAX_INTEGER_BITS = 256  # |value| < 2**256, about 77 decimal digits

_SYMBOLS = "integers, parentheses and + - * / // % **"


def _checked(value: int) -> int:
    if value.bit_length() > MAX_INTEGER_BITS:
        raise ToolError(
            f"The calculator works with integers below 2**{MAX_INTEGER_BITS} in size; this "
            "expression goes beyond that. Split it into smaller steps."
        )
    return value


def _divide(a: int, b: int) -> int:
    if b == 0:
        raise ToolError("Division by zero; check the divisor.")
    quotient, remainder = divmod(a, b)
    if remainder:
        raise ToolError(
            f"{a} / {b} is not a whole number and the calculator works with integers; use // "
            "for floor division and % for the remainder."
        )
    return quotient


def _floordiv(a: int, b: int) -> int:
    if b == 0:
        raise ToolError("Division by zero; check the divisor.")
    return a // b


def _mod(a: int, b: int) -> int:
    if b == 0:
        raise ToolError("Modulo by zero; check the divisor.")
    return a % b


def _power(base: int, exponent: int) -> int:
    if exponent < 0:
        raise ToolError(
            f"{base} ** {exponent} is not an integer; the calculator takes exponents >= 0."
        )
    if abs(base) > 1 and (abs(base).bit_length() - 1) * exponent > MAX_INTEGER_BITS:
        raise ToolError(
            f"{base} ** {exponent} is too large for the calculator (integers below "
            f"2**{MAX_INTEGER_BITS}); use a smaller exponent."
        )
    return base**exponent


_BINARY: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _divide,
    ast.FloorDiv: _floordiv,
    ast.Mod: _mod,
    ast.Pow: _power,
}
_UNARY: dict[type[ast.unaryop], Callable[[int], int]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def _evaluate(node: ast.AST) -> int:
    if isinstance(node, ast.Constant):
        # bool is an int subclass; True + True is not integer arithmetic anyone asked for.
        if type(node.value) is not int:
            raise ToolError(
                f"The calculator takes integers only, got {node.value!r}; it works with "
                f"{_SYMBOLS}."
            )
        return _checked(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        return _checked(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _checked(_UNARY[type(node.op)](_evaluate(node.operand)))
    raise ToolError(
        f"The calculator does not understand {ast.unparse(node)!r}; it works with {_SYMBOLS}."
    )


def evaluate_integer_expression(expression: str) -> int:
    """The value of an integer arithmetic expression such as ``3 * (4 + 5)``.

    Raises ``ToolError`` (with a message meant for a model) for anything else: names, calls,
    floats, strings, comparisons, an expression that is too long or a result that is too big.
    """
    if not isinstance(expression, str):
        raise ToolError(f"The expression must be text, got {type(expression).__name__}.")
    text = expression.strip()
    if not text:
        raise ToolError("The expression is empty; write one such as 3 * (4 + 5).")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(
            f"The expression is {len(text)} characters long; the calculator takes at most "
            f"{MAX_EXPRESSION_CHARS}. Split it into smaller steps."
        )
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError) as exc:
        reason = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise ToolError(
            f"{text!r} is not a valid arithmetic expression ({reason}); the calculator works "
            f"with {_SYMBOLS}."
        ) from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ToolError(
            f"The expression has too many parts (at most {MAX_NODES} allowed); split it into "
            "smaller steps."
        )
    return _evaluate(tree.body)


def _calculator(expression: str) -> int:
    """Evaluate an integer arithmetic expression.

    Args:
        expression: e.g. 3 * (4 + 5)
    """
    return evaluate_integer_expression(expression)


calculator = MelleaTool.from_callable(_calculator, name="calculator")


def lookup_tool(table: Mapping[str, Any], *, name: str = "lookup") -> MelleaTool:
    """A tool that returns the value stored under a key in ``table`` (copied now).

    An exact key wins; otherwise a unique case-insensitive match. A missing key is an error
    that lists some known keys, so a model can correct itself.
    """
    data = dict(table)
    if not all(isinstance(key, str) for key in data):
        raise ToolError("lookup_tool keys must be strings, as a model writes them.")
    folded: dict[str, list[str]] = {}
    for key in data:
        folded.setdefault(key.strip().casefold(), []).append(key)

    def lookup(key: str) -> Any:
        """Look up the value stored under a key.

        Args:
            key: The key to look up.
        """
        if key in data:
            return data[key]
        matches = folded.get(key.strip().casefold(), [])
        if len(matches) == 1:
            return data[matches[0]]
        known = ", ".join(repr(k) for k in list(data)[:10])
        more = f" and {len(data) - 10} more" if len(data) > 10 else ""
        raise ToolError(f"No value is stored under the key {key!r}. Known keys: {known}{more}.")

    return MelleaTool.from_callable(lookup, name=name)
