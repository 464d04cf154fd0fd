"""Model options on the scoring side: honoured where they mean something, refused elsewhere.

An intrinsic call decodes greedily and reads probabilities, so most generation options have
nothing to act on. Dropping them silently would let a caller believe a seed or a stop string
changed the result, so each option either has a stated effect here or is a typed error:

- ``MAX_NEW_TOKENS``: the token budget of the general (generating) path, instead of the
  io.yaml's ``max_completion_tokens``; the one-forward path generates nothing and needs none;
- ``TEMPERATURE``: probabilities are read at this temperature (``softmax(logits / T)``), as an
  engine reporting logprobs of its processed scores does; 0 reads them as they are. Greedy
  choices do not change;
- ``SYSTEM_PROMPT``: a system turn before the conversation, as in generation;
- ``THINKING`` and chat-template variables: passed to the chat template, as in generation.

Anything else (a seed, stop strings, tools, streaming, sampling knobs) is refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mellea_local.errors import IntrinsicOptionError, ModelOptionError
from mellea_local.options import (
    THINKING_TEMPLATE_VARS,
    ModelOption,
    merge_options,
    template_variables,
)

_RESERVED_TEMPLATE_VARS = frozenset({"messages", "tools", "documents", "add_generation_prompt"})


@dataclass(frozen=True)
class ScoringOptions:
    """The options an intrinsic call honours, validated."""

    max_new_tokens: int | None = None
    temperature: float = 0.0
    system_prompt: str | None = None
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)


def scoring_options(
    model_options: Mapping[str, Any] | None, chat_template: str | None,
    *, defaults: Mapping[str, Any] | None = None,
) -> ScoringOptions:
    """Validate a call's ``model_options`` for an intrinsic (see the module docstring).

    ``defaults`` are the io.yaml's ``parameters``: its ``temperature`` is the temperature
    probabilities are read at unless the call sets one (its ``max_completion_tokens`` is
    the general path's budget, read there).
    """
    try:
        options = merge_options(None, model_options)
    except ModelOptionError as exc:
        raise IntrinsicOptionError(str(exc), exc.option or "model_options") from exc
    template_names = template_variables(chat_template) - _RESERVED_TEMPLATE_VARS
    max_new_tokens: int | None = None
    temperature = float((defaults or {}).get("temperature") or 0.0)
    system_prompt: str | None = None
    template_kwargs: dict[str, Any] = {}
    for key, value in options.items():
        if value is None:
            continue
        if key == ModelOption.MAX_NEW_TOKENS:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise IntrinsicOptionError(
                    f"ModelOption.MAX_NEW_TOKENS must be a positive integer, not {value!r}.", key)
            max_new_tokens = value
        elif key == ModelOption.TEMPERATURE:
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value) or value < 0):
                raise IntrinsicOptionError(
                    f"ModelOption.TEMPERATURE must be a number >= 0, not {value!r}.", key)
            temperature = float(value)
        elif key == ModelOption.SYSTEM_PROMPT:
            system_prompt = str(value)
        elif key == ModelOption.THINKING:
            target = next((v for v in THINKING_TEMPLATE_VARS if v in template_names), None)
            if target is None:
                raise IntrinsicOptionError(
                    "ModelOption.THINKING was given, but the chat template declares no thinking "
                    "switch; drop the option.", key)
            template_kwargs[target] = bool(value)
        elif key in template_names:
            template_kwargs[key] = value
        else:
            raise IntrinsicOptionError(
                f"Model option {key!r} means nothing to an intrinsic call: it decodes greedily "
                "and reads probabilities. Honoured options: MAX_NEW_TOKENS, TEMPERATURE, "
                "SYSTEM_PROMPT, THINKING and chat-template variables; drop the others.", key)
    return ScoringOptions(max_new_tokens, temperature, system_prompt, template_kwargs)
