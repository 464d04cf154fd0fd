"""Parsing stage: model text -> content, thinking and tool calls (checked against tool schemas)."""

from mellea_local.parsing.response import (
    ParsedResponse,
    ParsedToolCall,
    parse_response,
    parse_with_tokenizer,
    split_thinking,
)
from mellea_local.parsing.tool_schema import function_parameters, schema_errors, validate_arguments

__all__ = [
    "ParsedResponse",
    "ParsedToolCall",
    "function_parameters",
    "parse_response",
    "parse_with_tokenizer",
    "schema_errors",
    "split_thinking",
    "validate_arguments",
]
