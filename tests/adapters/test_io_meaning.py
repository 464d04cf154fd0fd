"""io.yaml meaning checks: settings that would change results silently are refused, named."""

from __future__ import annotations

import math

import pytest

from mellea_local.adapters import IOConfig, TokenLogprob
from mellea_local.adapters.io_config import load_yaml_text
from mellea_local.adapters.transformations import final_channel
from mellea_local.errors import IOConfigError

ENUM = '{"type": "object", "properties": {"score": {"type": "string", "enum": ["yes", "no"]}}, ' \
    '"required": ["score"]}'


def load(text: str) -> IOConfig:
    return IOConfig.from_dict(load_yaml_text(text, "t.yaml"), source="t.yaml")


def likelihood(categories: str, schema: str = ENUM) -> str:
    return (f"response_format: '{schema}'\ntransformations:\n  - type: likelihood\n"
            f"    input_path: [score]\n    categories_to_values: {categories}\n")


def test_quoted_categories_load() -> None:
    assert load(likelihood('{"yes": 1.0, "no": 0.0}')).needs_logprobs


@pytest.mark.parametrize(("categories", "message"), [
    ("{yes: 1.0, no: 0.0}", "quote them"),          # YAML 1.1 booleans
    ('{"1": 1.0, 0: 0.0}', "can never produce"),    # an integer against a string enum
    ('{"yes": 1.0, "maybe": 0.5, "no": 0.0}', r"\['maybe'\]"),
    ('{"": 1.0, "no": 0.0}', "empty category"),
])
def test_categories_the_schema_cannot_produce_are_refused(categories: str, message: str) -> None:
    with pytest.raises(IOConfigError, match=message):
        load(likelihood(categories))


def test_prefix_categories_are_refused() -> None:
    schema = ('{"type": "object", "properties": {"score": {"type": "string", '
              '"enum": ["1", "10"]}}, "required": ["score"]}')
    with pytest.raises(IOConfigError, match="begins category '10'"):
        load(likelihood('{"1": 0.1, "10": 1.0}', schema))


def test_required_must_name_a_defined_property() -> None:
    schema = ('{"type": "object", "properties": {"score": {"type": "string"}}, '
              '"required": ["scroe"]}')
    with pytest.raises(IOConfigError, match=r"requires \['scroe'\]"):
        load(f"response_format: '{schema}'\ntransformations: null\n")


def test_nested_required_and_refs_are_checked() -> None:
    schema = ('{"$defs": {"E": {"type": "object", "properties": {"f": {"type": "string", '
              '"enum": ["a", "b"]}}, "required": ["f"]}}, "type": "array", '
              '"items": {"$ref": "#/$defs/E"}}')
    base = (f"response_format: '{schema}'\ntransformations:\n  - type: likelihood\n"
            "    input_path: [null, f]\n    categories_to_values: ")
    assert load(base + '{"a": 1, "b": 0}\n')
    with pytest.raises(IOConfigError, match="quote"):
        load(base + "{true: 1, b: 0}\n")


@pytest.mark.parametrize(("boundaries", "message"), [
    ("{response: r}", "location"),
    ("{last_message: '<r>'}", "a tag is letters"),
])
def test_sentence_boundaries_are_checked(boundaries: str, message: str) -> None:
    with pytest.raises(IOConfigError, match=message):
        load(f"response_format: null\ntransformations: null\nsentence_boundaries: {boundaries}\n")


@pytest.mark.parametrize("key", ["top_p", "seed", "stop"])
def test_unapplied_parameters_are_refused_before_use(key: str) -> None:
    config = load(f"response_format: null\ntransformations: null\n"
                  f"parameters: {{max_completion_tokens: 5, {key}: 1}}\n")
    with pytest.raises(IOConfigError, match=key):
        config.check_supported()
    load("response_format: null\ntransformations: null\n"
         "parameters: {max_completion_tokens: 5, temperature: 0.5}\n").check_supported()


def test_string_docs_cannot_be_decoded() -> None:
    config = load("response_format: null\ntransformations:\n  - type: decode_sentences\n"
                  "    input_path: [null, c]\n    source: documents\n"
                  "    output_names: {begin: b}\nsentence_boundaries: {documents: c}\n"
                  "docs_as_message: string\n")
    with pytest.raises(IOConfigError, match="'json' or 'roles'"):
        config.check_supported()


def test_final_channel_takes_the_harmony_payload() -> None:
    pieces = ["<|channel|>", "analysis", "<|message|>", "think", "<|end|>", "<|start|>",
              "assistant", "<|channel|>", "final", "<|message|>", '{"a"', ": 1}", "<|return|>"]
    tokens = [TokenLogprob(p, math.log(0.5)) for p in pieces]
    assert "".join(t.token for t in final_channel(tokens)) == '{"a": 1}'
    spelled = [TokenLogprob(p, 0.0) for p in ["<|", "channel", "|>", "final", '{"a": 1}']]
    assert final_channel(spelled) == spelled  # text that spells a header is not a header
