"""The embedded model family: built offline, deterministically, in about a second.

A byte-level BPE tokenizer trained on a fixed corpus, a granite-style chat template (roles,
tools, thinking, tool calls) with a matching `parse_response` template, and random-init Llama
models of any size. Tests build a tiny one; the shipped trained model (issue 5) starts from the
same tokenizer and templates.
"""

from pathlib import Path

from .model import build_model, build_tiny, generation_config, model_config, save
from .tokenizer import (
    END_OF_ROLE,
    END_OF_TEXT,
    MARKUP_TOKENS,
    PAD,
    SPECIAL_TOKENS,
    START_OF_ROLE,
    THINK_CLOSE,
    THINK_OPEN,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    VOCAB_SIZE,
    build_tokenizer,
    chat_template,
    response_template,
)

__all__ = [
    "END_OF_ROLE",
    "END_OF_TEXT",
    "MARKUP_TOKENS",
    "PAD",
    "SPECIAL_TOKENS",
    "START_OF_ROLE",
    "THINK_CLOSE",
    "THINK_OPEN",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "VOCAB_SIZE",
    "build_model",
    "build_tiny",
    "build_tokenizer",
    "chat_template",
    "generation_config",
    "model_config",
    "response_template",
    "save",
    "trained_weights_dir",
]


def trained_weights_dir() -> Path:
    """The folder of the shipped trained model, ``mellea-tiny-chat`` (inside the package)."""
    return Path(__file__).parent / "weights" / "mellea-tiny-chat"
