"""What a generation records besides its text: metadata, the provider's payload, a log entry.

Each is a plain dataclass a thunk carries (``mot.generation``, ``mot.raw``,
``mot.generate_log``), with the field names of the peer library so code that reads them ports
unchanged. Our backend fills ``generation`` (usage, model, provider, time to first token,
finish reasons); ``raw`` holds the decoded text before parsing.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GenerationMetadata:
    """How one output was produced; every field is optional because not every path knows it.

    ``usage`` holds ``prompt_tokens``/``completion_tokens``/``total_tokens``; ``ttfb_ms`` is the
    time to the first token in milliseconds (streaming only); ``finish_reasons`` is one entry
    per choice (``"stop"``, ``"length"``, ``"tool_calls"``); ``logits``/``raw_logits`` stay
    None (this backend does not surface them).
    """

    usage: dict[str, Any] | None = None
    model: str | None = None
    provider: str | None = None
    ttfb_ms: float | None = None
    streaming: bool = False
    response_model: str | None = None
    finish_reasons: list[str] | None = None
    response_id: str | None = None
    logits: tuple[Any, ...] | None = None
    raw_logits: tuple[Any, ...] | None = None


@dataclass
class RawProviderResponse:
    """The backend-native payload behind an output (``provider`` says how to read it).

    Portable code reads ``value``, ``tool_calls`` or ``generation`` instead.
    """

    provider: str | None = None
    response: Any | None = None
    streamed_chunks: list[Any] | None = None


@dataclass
class GenerateLog:
    """One log entry for a generation call: what was asked, of which backend, with what result."""

    date: datetime.datetime | None = None
    prompt: str | list[dict[str, Any]] | None = None
    backend: str | None = None
    model_options: dict[str, Any] | None = None
    model_output: Any | None = None
    action: Any | None = None
    result: Any | None = None
    is_final_result: bool | None = False
    extra: dict[str, Any] | None = field(default=None)
