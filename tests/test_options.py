"""Model options are checked before they reach transformers: a bad one fails naming itself.

Before the check, NaN or negative temperatures and ``max_new_tokens <= 0`` reached ``generate``
and came back as raw ``ValueError``s from transformers; ``top_p=2``, ``top_k=-1``, a float seed
or ``temperature=True`` ran silently; a non-str key or a str instead of a dict raised
``AttributeError``.
"""

from __future__ import annotations

import math

import pytest

from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model
from mellea_local.errors import ModelOptionError, ModelOptionTypeError
from mellea_local.messages import Message
from mellea_local.options import ModelOption, check_options, merge_options, split_options

MNT = ModelOption.MAX_NEW_TOKENS

# (options, the words the error must contain, error class)
BAD = [
    ({"temperature": math.nan}, ["'temperature'", ">= 0"], ModelOptionError),
    ({"temperature": math.inf}, ["'temperature'", "finite"], ModelOptionError),
    ({"temperature": -0.5}, ["'temperature'", ">= 0"], ModelOptionError),
    ({"temperature": "hot"}, ["'temperature'", "str"], ModelOptionTypeError),
    ({"temperature": True}, ["'temperature'", "bool"], ModelOptionTypeError),
    ({"top_p": 2}, ["'top_p'", "(0, 1]"], ModelOptionError),
    ({"top_p": 0.0}, ["'top_p'", "(0, 1]"], ModelOptionError),
    ({"top_k": -1}, ["'top_k'", ">= 0"], ModelOptionError),
    ({"top_k": 2.5}, ["'top_k'", "an int"], ModelOptionTypeError),
    ({"repetition_penalty": 0}, ["'repetition_penalty'", "> 0"], ModelOptionError),
    ({MNT: 0}, ["ModelOption.MAX_NEW_TOKENS", "[1, 1,000,000]"], ModelOptionError),
    ({MNT: -5}, ["ModelOption.MAX_NEW_TOKENS", "[1, 1,000,000]"], ModelOptionError),
    ({MNT: 10**12}, ["ModelOption.MAX_NEW_TOKENS", "[1, 1,000,000]"], ModelOptionError),
    ({MNT: "64"}, ["ModelOption.MAX_NEW_TOKENS", "str"], ModelOptionTypeError),
    ({"max_new_tokens": 0}, ["'max_new_tokens' (ModelOption.MAX_NEW_TOKENS)"], ModelOptionError),
    ({ModelOption.SEED: 1.5}, ["ModelOption.SEED", "float"], ModelOptionTypeError),
    ({"seed": "a"}, ["'seed' (ModelOption.SEED)", "an int"], ModelOptionTypeError),
    ({ModelOption.SEED: 2**64}, ["ModelOption.SEED", "2**64 - 1"], ModelOptionError),
    ({ModelOption.STREAM: "yes"}, ["ModelOption.STREAM", "True or False"], ModelOptionTypeError),
    ({ModelOption.THINKING: 1}, ["ModelOption.THINKING", "True or False"], ModelOptionTypeError),
    ({ModelOption.STOP_SEQUENCES: [""]}, ["ModelOption.STOP_SEQUENCES", "empty"],
     ModelOptionError),
    ({ModelOption.STOP_SEQUENCES: 5}, ["ModelOption.STOP_SEQUENCES", "list of str"],
     ModelOptionTypeError),
    ({ModelOption.SYSTEM_PROMPT: ["x"]}, ["ModelOption.SYSTEM_PROMPT", "str"],
     ModelOptionTypeError),
    ({1: 2}, ["keys are str", "1 (int)"], ModelOptionTypeError),
]


@pytest.fixture(scope="module")
def backend(tiny_tokenizer):
    return LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=3), tiny_tokenizer,
                                      model_id="tiny-llama")


async def _greedy(backend, options):
    mot, _ = await backend.generate_from_context(Message("user", "hi"), ChatContext(),
                                                 model_options=options)
    return await mot.avalue()


@pytest.mark.parametrize(("options", "words", "cls"), BAD, ids=[repr(b[0]) for b in BAD])
async def test_a_bad_option_fails_before_generate_naming_itself(backend, options, words, cls):
    before = backend.stats.total
    with pytest.raises(cls) as info:
        await _greedy(backend, {MNT: 4, **options})
    assert type(info.value) is cls
    for word in words:
        assert word in str(info.value)
    # Nothing ran and nothing broke: the backend still answers.
    assert backend.stats.total == before
    assert isinstance(await _greedy(backend, {MNT: 2}), str)


def test_options_that_are_not_a_mapping_fail_naming_the_argument(tiny_tokenizer):
    with pytest.raises(ModelOptionTypeError, match="model_options must be a dict"):
        check_options("temperature=0")
    with pytest.raises(ModelOptionTypeError, match="model_options must be a dict"):
        merge_options(None, [("temperature", 0)])  # type: ignore[arg-type]
    with pytest.raises(ModelOptionError, match="'top_p'"):
        LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=3), tiny_tokenizer,
                                   model_options={"top_p": -1})


VALID = [
    {},
    {"temperature": 0},
    {"temperature": 0, "top_p": 1.0, "top_k": 0},
    {ModelOption.TEMPERATURE: 0.0, "max_new_tokens": 6, ModelOption.SEED: None},
    {"repetition_penalty": 1.0, ModelOption.STOP_SEQUENCES: []},
]


@pytest.mark.parametrize("options", VALID, ids=[repr(v) for v in VALID])
async def test_valid_greedy_options_change_nothing(backend, options):
    assert await _greedy(backend, {MNT: 6, **options}) == await _greedy(backend, {MNT: 6})


def test_valid_options_route_as_before():
    template = "{{ messages }}{{ enable_thinking }}{{ custom_var }}"
    options = merge_options({"seed": 3, "temperature": 0.7}, {
        "top_p": 0.9, "top_k": 40, "max_new_tokens": 12, "stop": "END",
        ModelOption.THINKING: True, "custom_var": object, "num_beams": 1,
    })
    gen, tmpl = split_options(options, template)
    assert gen == {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "max_new_tokens": 12,
                   "stop_strings": ["END"], "num_beams": 1, "do_sample": True}
    assert tmpl == {"enable_thinking": True, "custom_var": object}
