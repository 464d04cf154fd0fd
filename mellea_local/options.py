"""Model options: backend-neutral names and the two allowlists that route them.

A user option can mean three things to a Hugging Face backend: something we interpret
ourselves (tools, system prompt, streaming), a ``generate()`` keyword, or a variable of the
tokenizer's chat template. Sending one to the wrong place either crashes (``generate`` rejects
``enable_thinking``) or silently does nothing (a template never sees ``temperature``), so each
option is routed through an explicit allowlist instead of being forwarded wholesale.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from mellea_local.errors import ModelOptionError, ModelOptionTypeError

logger = logging.getLogger(__name__)


class ModelOption:
    """Backend-neutral option names.

    The ``@@@`` sentinels mark options the backend interprets itself; ``TEMPERATURE`` is a plain
    name because every backend forwards it unchanged.
    """

    TEMPERATURE = "temperature"
    MAX_NEW_TOKENS = "@@@max_new_tokens@@@"
    SEED = "@@@seed@@@"
    STOP_SEQUENCES = "@@@stop@@@"
    SYSTEM_PROMPT = "@@@system_prompt@@@"
    THINKING = "@@@thinking@@@"
    TOOLS = "@@@tools@@@"
    STREAM = "@@@stream@@@"
    CONSTRAIN_TOOL_CALLS = "@@@constrain_tool_calls@@@"
    """With tool calling on: decode the reply under the tool-call grammar (True), not (False);
    unset: on exactly when the chat template has no tool slot (``parsing.tool_grammar``)."""
    TOOL_CHOICE = "@@@tool_choice@@@"
    """With tool calling on and calls constrained: the name of the one tool the step may call
    (OpenAI's ``tool_choice``); unset: any offered tool."""
    REPLAY_THINKING = "@@@replay_thinking@@@"
    """Earlier assistant turns keep their thinking in the prompt (True, the default: the
    prompt extends the previous one, so the KV cache serves it) or lose it (False)."""
    AGENT_ADAPTER = "@@@agent_adapter@@@"
    """With tool calling on: decode the step with the backend's agent adapter (an aLoRA
    invoked at the assistant header, ``core.backend.AGENT``): unset or True, the one loaded,
    else the shipped one for this model when the library has it (loaded on first use); False,
    the base model; a str, the loaded adapter of that name."""


# Plain spellings users write, mapped onto the sentinels.
_ALIASES: dict[str, str] = {
    "max_new_tokens": ModelOption.MAX_NEW_TOKENS,
    "seed": ModelOption.SEED,
    "stop": ModelOption.STOP_SEQUENCES,
    "stop_strings": ModelOption.STOP_SEQUENCES,
    "system": ModelOption.SYSTEM_PROMPT,
    "tools": ModelOption.TOOLS,
    "stream": ModelOption.STREAM,
    "thinking": ModelOption.THINKING,
    "think": ModelOption.THINKING,
    "enable_thinking": ModelOption.THINKING,
}

# Template variables the renderer owns; a user option must never override them.
_TEMPLATE_RESERVED = frozenset(
    {"messages", "tools", "documents", "add_generation_prompt", "raise_exception",
     "strftime_now", "bos_token", "eos_token", "pad_token", "unk_token", "tokenize"}
)

# generate() keywords the backend sets itself (inputs, cache, streaming, constraints).
_GENERATE_RESERVED = frozenset(
    {"inputs", "input_ids", "attention_mask", "past_key_values", "cache", "streamer",
     "logits_processor", "stopping_criteria", "generation_config",
     "synced_gpus", "assistant_model", "custom_generate", "use_cache", "return_dict_in_generate",
     "tokenizer", "stop_strings", "max_new_tokens", "kwargs", "self"}
)

# Template variables that switch on a thinking trace, in order of preference.
THINKING_TEMPLATE_VARS = ("enable_thinking", "thinking", "think")


# The longest answer a call may ask for: far beyond any model's positions, so it only refuses
# values that are typos or overflow (10**12 would otherwise run until EOS, whatever that takes).
MAX_NEW_TOKENS_LIMIT = 1_000_000

# The budget of a generation when neither the call, the backend's model_options nor the model's
# own generation_config sets one. transformers would stop after 20 new tokens, which cut the
# peer's quick-start email mid-sentence ("Dear Olivia,\n\nI hope this email"). The peer's HF
# backend has no default of its own (it inherits that 20); its docs advise 512-2048 for chat
# and instructions and use 1024 (docs/how-to/configure-model-options.md): we take 1024.
DEFAULT_MAX_NEW_TOKENS = 1024
_SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts

# Option -> (kind, test of the value, the allowed values in words). Kinds: "number" (a finite
# real, never a bool), "int" (an integer, never a bool), "bool". None always means "unset".
_Rule = tuple[str, Callable[[Any], bool], str]
_RULES: dict[str, _Rule] = {
    ModelOption.TEMPERATURE: ("number", lambda v: v >= 0, "a finite number >= 0 (0 is greedy)"),
    "top_p": ("number", lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "typical_p": ("number", lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "min_p": ("number", lambda v: 0 <= v <= 1, "a number in [0, 1]"),
    "epsilon_cutoff": ("number", lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "eta_cutoff": ("number", lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "repetition_penalty": ("number", lambda v: v > 0, "a finite number > 0 (1 is off)"),
    "length_penalty": ("number", lambda v: True, "a finite number"),
    "diversity_penalty": ("number", lambda v: v >= 0, "a finite number >= 0"),
    "top_k": ("int", lambda v: v >= 0, "an int >= 0 (0 is off)"),
    "num_beams": ("int", lambda v: v >= 1, "an int >= 1"),
    "num_beam_groups": ("int", lambda v: v >= 1, "an int >= 1"),
    # A call returns one answer: more sequences would be computed and dropped (and greedy
    # decoding makes transformers refuse them with its own message).
    "num_return_sequences": ("int", lambda v: v == 1,
                             "1 (a call returns one answer; make several calls with "
                             "temperature > 0 for several answers)"),
    "no_repeat_ngram_size": ("int", lambda v: v >= 0, "an int >= 0"),
    "min_new_tokens": ("int", lambda v: 0 <= v <= MAX_NEW_TOKENS_LIMIT,
                       f"an int in [0, {MAX_NEW_TOKENS_LIMIT:,}]"),
    "min_length": ("int", lambda v: v >= 0, "an int >= 0"),
    "max_length": ("int", lambda v: v >= 1, "an int >= 1"),
    ModelOption.MAX_NEW_TOKENS: ("int", lambda v: 1 <= v <= MAX_NEW_TOKENS_LIMIT,
                                 f"an int in [1, {MAX_NEW_TOKENS_LIMIT:,}]"),
    ModelOption.SEED: ("int", lambda v: _SEED_RANGE[0] <= v <= _SEED_RANGE[1],
                       "an int in [-2**63, 2**64 - 1]"),
    "do_sample": ("bool", lambda v: True, "True or False"),
    ModelOption.THINKING: ("bool", lambda v: True, "True or False"),
    ModelOption.STREAM: ("bool", lambda v: True, "True or False"),
    ModelOption.CONSTRAIN_TOOL_CALLS: ("bool", lambda v: True, "True, False or None (auto)"),
    ModelOption.REPLAY_THINKING: ("bool", lambda v: True, "True or False"),
}
_KIND_TEST: dict[str, Callable[[Any], bool]] = {
    "number": lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool),
    "int": lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
}


def option_label(key: str) -> str:
    """How an error names an option: ``ModelOption.SEED`` for a sentinel, else the key."""
    for attr, value in vars(ModelOption).items():
        if value == key and attr.isupper() and key.startswith("@@@"):
            return f"ModelOption.{attr}"
    return repr(key)


def check_option(key: object, value: Any) -> None:
    """Refuse an option transformers would reject with a raw error or silently misread.

    Raises ``ModelOptionTypeError`` for a key that is not a str or a value of the wrong type,
    ``ModelOptionError`` for one out of range; either names the option and what it allows.
    Options without a rule (other ``generate`` keywords, template variables) pass unchanged.
    """
    if not isinstance(key, str):
        raise ModelOptionTypeError(
            f"Model option keys are str (ModelOption.* or a generate()/template name); got "
            f"{key!r} ({type(key).__name__})."
        )
    name = _ALIASES.get(key, key)
    label = option_label(name) if name == key else f"{key!r} ({option_label(name)})"
    if value is None and name == ModelOption.MAX_NEW_TOKENS:
        # None would replace the backend's default and reach int(); say what to do instead.
        raise ModelOptionTypeError(
            f"Model option {label} is None; give an int in [1, {MAX_NEW_TOKENS_LIMIT:,}], or "
            "leave the option out to use the backend's default.", name,
        )
    if value is None:
        return
    if name == ModelOption.STOP_SEQUENCES:
        _check_stop(label, name, value)
        return
    if name == ModelOption.TOOLS and (isinstance(value, (str, bytes))
                                      or not isinstance(value, (list, tuple, Mapping))):
        raise ModelOptionTypeError(
            f"Model option {label} is {_short(value)} ({type(value).__name__}); give a list of "
            "tools (MelleaTool or @tool functions) or a dict of them by name.", name,
        )
    if name == ModelOption.SYSTEM_PROMPT and not isinstance(value, str):
        raise ModelOptionTypeError(
            f"Model option {label} is a {type(value).__name__}; give the system prompt as a str.",
            name,
        )
    if name == ModelOption.AGENT_ADAPTER and not isinstance(value, bool | str):
        raise ModelOptionTypeError(
            f"Model option {label} is {_short(value)} ({type(value).__name__}); give True "
            "(the agent adapter when there is one), False (the base model) or the name of a "
            "loaded adapter.", name,
        )
    if name in TOKEN_ID_OPTIONS:
        _check_token_shape(label, name, value)
        return
    rule = _RULES.get(name)
    if rule is None:
        return
    kind, allowed, words = rule
    if not _KIND_TEST[kind](value):
        raise ModelOptionTypeError(
            f"Model option {label} is {_short(value)} ({type(value).__name__}); it must be "
            f"{words}.", name,
        )
    if (kind == "number" and not math.isfinite(value)) or not allowed(value):
        raise ModelOptionError(f"Model option {label} is {_short(value)}; it must be {words}.",
                               name)


# generate() options that hold token ids, and the shape each takes: "id" (one id), "ids" (a
# list of ids), "id|ids" (either), "seqs" (a list of non-empty lists of ids). transformers
# silently ignores an id beyond the vocabulary in some (suppress_tokens) and fails with its
# own message on a wrong shape in others (bad_words_ids="x").
TOKEN_ID_OPTIONS: dict[str, str] = {
    "suppress_tokens": "ids", "begin_suppress_tokens": "ids",
    "forced_eos_token_id": "id|ids", "eos_token_id": "id|ids", "forced_bos_token_id": "id",
    "pad_token_id": "id", "bos_token_id": "id", "decoder_start_token_id": "id",
    "bad_words_ids": "seqs", "force_words_ids": "seqs",
}
_TOKEN_SHAPE_WORDS = {
    "id": "a token id (an int >= 0)", "ids": "a list of token ids (ints >= 0)",
    "id|ids": "a token id or a list of token ids (ints >= 0)",
    "seqs": "a list of non-empty lists of token ids, e.g. [[42], [7, 9]] "
            "(build them with tokenizer.encode(word, add_special_tokens=False))",
}


def _is_id(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0


def _is_ids(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(_is_id(v) for v in value)


def _token_ids(shape: str, value: Any) -> list[int] | None:
    """Every id in ``value`` if it has ``shape``, else None."""
    if shape in ("id", "id|ids") and _is_id(value):
        return [int(value)]
    if shape in ("ids", "id|ids") and _is_ids(value):
        return [int(v) for v in value]
    if (shape == "seqs" and isinstance(value, (list, tuple)) and value
            and all(_is_ids(s) and len(s) > 0 for s in value)):
        return [int(v) for s in value for v in s]
    return None


def _check_token_shape(label: str, name: str, value: Any) -> None:
    if _token_ids(TOKEN_ID_OPTIONS[name], value) is None:
        raise ModelOptionTypeError(
            f"Model option {label} is {_short(value)} ({type(value).__name__}); it must be "
            f"{_TOKEN_SHAPE_WORDS[TOKEN_ID_OPTIONS[name]]}.", name,
        )


def check_token_options(gen_kwargs: Mapping[str, Any], vocab_size: int) -> None:
    """Refuse a token id beyond the vocabulary in a ``generate()`` option (after
    ``check_options`` checked the shapes): suppressing or forcing a token that does not exist
    is a typo or another model's id, and transformers ignores it or fails deep inside."""
    for name, shape in TOKEN_ID_OPTIONS.items():
        value = gen_kwargs.get(name)
        if value is None:
            continue
        ids = _token_ids(shape, value) or []
        outside = sorted({i for i in ids if i >= vocab_size})
        if outside:
            raise ModelOptionError(
                f"Model option {name!r} holds token id(s) {outside[:5]} outside this model's "
                f"vocabulary of {vocab_size} tokens (ids 0..{vocab_size - 1}); use ids from "
                "this model's tokenizer, e.g. tokenizer.convert_tokens_to_ids(token).", name,
            )


def _check_stop(label: str, name: str, value: Any) -> None:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) for s in items):
        raise ModelOptionTypeError(
            f"Model option {label} is {_short(value)}; give a str or a list of str.", name
        )
    if any(not s for s in items):
        raise ModelOptionError(
            f"Model option {label} holds an empty stop string, which would stop at once; "
            "remove it.", name
        )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_options(options: object, argument: str = "model_options") -> None:
    """``check_option`` for every entry of ``options``, which must be a mapping or None."""
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise ModelOptionTypeError(
            f"{argument} must be a dict of options (e.g. {{ModelOption.MAX_NEW_TOKENS: 64}}) or "
            f"None; got {type(options).__name__}."
        )
    for key, value in options.items():
        check_option(key, value)


def merge_options(
    defaults: Mapping[str, Any] | None, overrides: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Merge backend defaults with call options (the call wins), normalising aliases.

    Normalising before merging matters: a default ``seed`` and a call ``ModelOption.SEED`` are
    the same option, so the call's value must replace the default's. Both are checked first
    (``check_options``), so a bad option fails here, naming itself, and never reaches
    ``generate``.
    """
    check_options(defaults, "the backend's model_options")
    check_options(overrides)
    merged: dict[str, Any] = {}
    for source in (defaults or {}, overrides or {}):
        for key, value in source.items():
            merged[_ALIASES.get(key, key)] = value
    return merged


@functools.cache
def generate_kwarg_names() -> frozenset[str]:
    """Keywords ``model.generate`` accepts from users: GenerationConfig fields, minus ours."""
    from transformers import GenerationConfig, GenerationMixin

    names = set(GenerationConfig().to_dict())
    names |= set(inspect.signature(GenerationMixin.generate).parameters)
    return frozenset(names - _GENERATE_RESERVED - {"transformers_version"})


@functools.cache
def template_variables(chat_template: str | None) -> frozenset[str]:
    """Variables a Jinja chat template reads but does not define itself.

    A template that cannot be parsed forwards nothing (logged) rather than guessing.
    """
    if not isinstance(chat_template, str):
        return frozenset()
    import jinja2
    import jinja2.meta

    env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
    try:
        ast = env.parse(chat_template)
    except jinja2.TemplateSyntaxError as exc:
        logger.warning("chat template cannot be parsed (%s); forwarding no template options", exc)
        return frozenset()
    return frozenset(jinja2.meta.find_undeclared_variables(ast))


def split_options(
    options: Mapping[str, Any], chat_template: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Route merged options into ``(generate_kwargs, template_kwargs)``.

    Sentinels are translated (MAX_NEW_TOKENS, STOP_SEQUENCES, THINKING, SEED, TEMPERATURE);
    other sentinels are the caller's business and are dropped here. Other keys go wherever an
    allowlist accepts them; a key neither accepts is a ``ModelOptionError`` naming the closest
    known spelling, since dropping it would run the call without what the caller asked for
    (a misspelt ``temprature`` would silently sample at the default).
    """
    gen_names = generate_kwarg_names()
    tmpl_names = template_variables(chat_template) - _TEMPLATE_RESERVED
    gen: dict[str, Any] = {}
    tmpl: dict[str, Any] = {}
    for key, value in options.items():
        if key == ModelOption.MAX_NEW_TOKENS:
            gen["max_new_tokens"] = int(value)
        elif key == ModelOption.STOP_SEQUENCES:
            if value:
                gen["stop_strings"] = [value] if isinstance(value, str) else list(value)
        elif key == ModelOption.THINKING:
            target = next((v for v in THINKING_TEMPLATE_VARS if v in tmpl_names), None)
            if target is None:
                if value:
                    logger.debug("THINKING requested but the chat template declares no switch")
            else:
                tmpl[target] = bool(value)
        elif key.startswith("@@@"):
            continue
        elif key in gen_names:
            gen[key] = value
        elif key in tmpl_names:
            tmpl[key] = value
        else:
            raise _unknown_option(key, gen_names | tmpl_names)
    _sampling_rules(gen, options)
    return gen, tmpl


def _unknown_option(key: str, known: frozenset[str]) -> ModelOptionError:
    names = sorted(known | set(_ALIASES)) + [
        f"ModelOption.{attr}" for attr, value in vars(ModelOption).items()
        if attr.isupper() and isinstance(value, str)]
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return ModelOptionError(
        f"Model option {key!r} is neither a ModelOption nor a generate() keyword nor a variable "
        f"of this model's chat template, so nothing would read it; {hint}Use ModelOption.* "
        "(e.g. ModelOption.TEMPERATURE) or a transformers generate() keyword.", key,
    )


def _sampling_rules(gen: dict[str, Any], options: Mapping[str, Any]) -> None:
    """Temperature 0 means greedy; a positive temperature or a seed means sampling.

    transformers silently ignores temperature and seed unless ``do_sample`` is set, and raises
    on ``temperature=0`` with sampling on, so both are settled here explicitly.
    """
    temperature = gen.get("temperature")
    if temperature is not None and float(temperature) == 0.0:
        gen.pop("temperature")
        gen["do_sample"] = False
        for key in ("top_p", "top_k", "min_p", "typical_p"):
            gen.pop(key, None)
    elif "do_sample" not in gen and (
        temperature is not None or options.get(ModelOption.SEED) is not None
    ):
        gen["do_sample"] = True
