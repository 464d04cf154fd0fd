"""Tools a model can call: Python functions with JSON schemas, plus two built-ins."""

from mellea_local.tools.builtin import calculator, evaluate_integer_expression, lookup_tool
from mellea_local.tools.tool import AbstractMelleaTool, MelleaTool, observation_text, tool

__all__ = [
    "AbstractMelleaTool",
    "MelleaTool",
    "calculator",
    "evaluate_integer_expression",
    "lookup_tool",
    "observation_text",
    "tool",
]
