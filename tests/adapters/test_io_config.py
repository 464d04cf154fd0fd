"""io.yaml parsing: the shipped requirement-check file, every field, every refusal."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from bounded import run_bounded

from mellea_local.adapters import REQUIREMENT_CHECK_IO_YAML, IOConfig, LikelihoodRule, NestRule
from mellea_local.errors import IOConfigError

SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["score"],
    "additionalProperties": False,
}

MINIMAL = """\
model: ~
response_format: |
  {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}
transformations: null
"""


def write(tmp_path: Path, text: str, name: str = "io.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_shipped_requirement_check_config_parses_into_typed_fields():
    config = IOConfig.load(REQUIREMENT_CHECK_IO_YAML)

    assert config.source == str(REQUIREMENT_CHECK_IO_YAML)
    assert config.model is None
    assert config.response_format_dict() == SCHEMA
    likelihood, nest = config.transformations
    assert isinstance(likelihood, LikelihoodRule)
    assert likelihood.input_path == ("score",)
    assert dict(likelihood.categories_to_values) == {"yes": 1.0, "no": 0.0}
    assert isinstance(nest, NestRule)
    assert (nest.input_path, nest.field_name) == ((), "requirement_check")
    assert dict(config.parameters) == {"max_completion_tokens": 15, "temperature": 0.0}
    assert config.needs_logprobs
    assert config.instruction_fields == {"requirement"}
    config.check_supported()  # nothing unimplemented


def test_rendered_instruction_is_the_published_message():
    config = IOConfig.load(REQUIREMENT_CHECK_IO_YAML)

    text = config.render_instruction(requirement="Answer in one sentence.", last_message="x")

    assert text == (
        "<requirements>: Answer in one sentence.\n"
        "Please verify if the assistant's generation satisfies the user's requirements or not "
        "and reply with a binary label accordingly. Respond with a json {\"score\": \"yes\"} if "
        "the constraints are satisfied or respond with {\"score\": \"no\"} if the constraints "
        "are not satisfied."
    )


def test_response_format_accepts_a_json_string_or_a_mapping(tmp_path):
    as_string = IOConfig.load(write(tmp_path, MINIMAL))
    as_mapping = IOConfig.from_dict(
        {
            "model": None,
            "response_format": {
                "type": "object", "properties": {"response": {"type": "string"}},
                "required": ["response"],
            },
            "transformations": None,
        }
    )
    assert as_string.response_format_dict() == as_mapping.response_format_dict()
    assert json.loads(json.dumps(as_string.response_format_dict()))["required"] == ["response"]


def test_minimal_config_defaults(tmp_path):
    config = IOConfig.load(write(tmp_path, MINIMAL))
    assert config.transformations is None
    assert config.instruction is None
    assert dict(config.parameters) == {}
    assert config.sentence_boundaries is None and config.docs_as_message is None
    assert config.logprobs_workaround is None and config.name is None
    assert not config.needs_logprobs
    assert config.fast_path_spec() is None
    # No rules: the output passes through as a copy.
    output = {"response": "hi"}
    result = config.apply_transformations(output)
    assert result == output and result is not output


def test_model_may_be_omitted_or_named():
    base = {"response_format": None, "transformations": None}
    assert IOConfig.from_dict(base).model is None
    assert IOConfig.from_dict({**base, "model": "granite-4.1-3b"}).model == "granite-4.1-3b"


def test_optional_public_keys_are_parsed(tmp_path):
    text = MINIMAL + (
        "name: citations\n"
        "sentence_boundaries: {last_message: c, documents: d}\n"
        "docs_as_message: roles\n"
        "logprobs_workaround: true\n"
    )
    config = IOConfig.load(write(tmp_path, text))
    assert config.name == "citations"
    assert dict(config.sentence_boundaries) == {"last_message": "c", "documents": "d"}
    assert config.docs_as_message == "roles"
    assert config.logprobs_workaround is True
    config.check_supported()  # every key of the public format is implemented


def test_config_is_frozen_deeply():
    config = IOConfig.load(REQUIREMENT_CHECK_IO_YAML)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.instruction = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.response_format["type"] = "array"  # type: ignore[index]
    with pytest.raises(TypeError):
        config.parameters["temperature"] = 1.0  # type: ignore[index]
    copy = config.response_format_dict()
    copy["properties"]["score"]["enum"].append("maybe")
    assert config.response_format_dict() == SCHEMA
    params = config.parameters_dict()
    params["temperature"] = 0.7
    assert config.parameters["temperature"] == 0.0


# --- refusals ---------------------------------------------------------------------------------


def test_unknown_key_names_the_key_and_the_file(tmp_path):
    path = write(tmp_path, MINIMAL + "system_prompt: be nice\n")
    with pytest.raises(IOConfigError) as info:
        IOConfig.load(path)
    assert isinstance(info.value, ValueError)
    assert "system_prompt" in str(info.value)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("key", ["response_format", "transformations"])
def test_missing_required_key_is_named(tmp_path, key):
    data = {"model": None, "response_format": None, "transformations": None}
    del data[key]
    with pytest.raises(IOConfigError, match=key):
        IOConfig.from_dict(data, source="adapter/io.yaml")


def test_unreadable_or_invalid_files_name_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "io.yaml"
    with pytest.raises(IOConfigError, match="nowhere"):
        IOConfig.load(missing)
    bad_yaml = write(tmp_path, "response_format: [unclosed\n", "bad.yaml")
    with pytest.raises(IOConfigError, match=r"bad\.yaml"):
        IOConfig.load(bad_yaml)
    a_list = write(tmp_path, "- 1\n- 2\n", "list.yaml")
    with pytest.raises(IOConfigError, match=r"list\.yaml.*mapping"):
        IOConfig.load(a_list)
    empty = write(tmp_path, "", "empty.yaml")
    with pytest.raises(IOConfigError, match=r"empty\.yaml"):
        IOConfig.load(empty)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("'{\"type\": \"object\",'", "not valid JSON"),
        ("'[1, 2]'", "JSON schema object"),
        ("42", "JSON schema object"),
    ],
)
def test_bad_response_format_is_refused(tmp_path, value, message):
    path = write(tmp_path, f"response_format: {value}\ntransformations: null\n")
    with pytest.raises(IOConfigError, match=message) as info:
        IOConfig.load(path)
    assert str(path) in str(info.value)


def test_unimplemented_rule_is_refused_at_load_time_with_the_supported_list(tmp_path):
    path = write(
        tmp_path,
        "response_format: null\n"
        "transformations:\n"
        "  - {type: nest, input_path: [], field_name: x}\n"
        "  - {type: summarise, input_path: [], target_field: spans}\n",
    )
    with pytest.raises(IOConfigError) as info:
        IOConfig.load(path)
    message = str(info.value)
    assert "'summarise'" in message
    assert "transformations[1]" in message
    assert "decode_sentences, drop_duplicates, explode, likelihood, merge_spans, nest, " \
        "project" in message
    assert str(path) in message


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("{type: likelihood, categories_to_values: {'yes': 1.0}}", "needs 'input_path'"),
        ("{type: likelihood, input_path: score, categories_to_values: {'yes': 1}}", "a list"),
        ("{type: likelihood, input_path: [1.5], categories_to_values: {'yes': 1}}", "1.5"),
        ("{type: likelihood, input_path: [true], categories_to_values: {'yes': 1}}", "True"),
        ("{type: likelihood, input_path: [score]}", "categories_to_values"),
        ("{type: likelihood, input_path: [score], categories_to_values: {}}", "non-empty"),
        ("{type: likelihood, input_path: [score], categories_to_values: {'yes': high}}", "numbers"),
        ("{type: likelihood, input_path: [score], categories_to_values: {'yes': .nan}}",
         "non-finite"),
        ("{type: likelihood, input_path: [score], categories_to_values: {1.5: 1.0}}", "1.5"),
        ("{type: likelihood, input_path: [s], categories_to_values: {'y': 1}, scale: 2}",
         "scale"),
        ("{type: nest, input_path: []}", "field_name"),
        ("{type: nest, input_path: [], field_name: ''}", "field_name"),
        ("{input_path: []}", "None"),
        ("nest", "mapping"),
    ],
)
def test_malformed_rules_are_refused(rule, message, tmp_path):
    path = write(tmp_path, f"response_format: null\ntransformations:\n  - {rule}\n")
    with pytest.raises(IOConfigError, match=message) as info:
        IOConfig.load(path)
    assert str(path) in str(info.value)


def test_transformations_must_be_a_list():
    with pytest.raises(IOConfigError, match="list of rules"):
        IOConfig.from_dict({"response_format": None, "transformations": {"type": "nest"}})


@pytest.mark.parametrize(
    "template",
    ["Check {requirement", "Check {0}", "Check {}", "Check {req.__class__}", "Check {r[0]}",
     "Check {requirement!r}", "Check {requirement:>10}"],
)
def test_bad_instruction_templates_are_refused_at_load(template):
    data = {"response_format": None, "transformations": None, "instruction": template}
    with pytest.raises(IOConfigError, match="instruction"):
        IOConfig.from_dict(data, source="x/io.yaml")


def test_render_instruction_names_missing_fields():
    data = {
        "response_format": None, "transformations": None,
        "instruction": "{requirement} / {last_message} {{literal}}",
    }
    config = IOConfig.from_dict(data, source="x/io.yaml")
    assert config.instruction_fields == {"requirement", "last_message"}
    with pytest.raises(IOConfigError) as info:
        config.render_instruction(requirement="r")
    assert "last_message" in str(info.value)
    assert "requirement'" not in str(info.value)
    rendered = config.render_instruction(requirement="r", last_message="m", extra=1)
    assert rendered == "r / m {literal}"


def test_render_without_instruction_is_an_error():
    config = IOConfig.from_dict({"response_format": None, "transformations": None})
    with pytest.raises(IOConfigError, match="no 'instruction'"):
        config.render_instruction(requirement="r")


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ("[1, 2]", "mapping"),
        ("{max_completion_tokens: 0}", "positive integer"),
        ("{max_completion_tokens: 1.5}", "positive integer"),
        ("{max_completion_tokens: true}", "positive integer"),
        ("{temperature: -0.1}", ">= 0"),
        ("{temperature: hot}", ">= 0"),
        ("{temperature: .inf}", ">= 0"),
    ],
)
def test_bad_parameters_are_refused(tmp_path, parameters, message):
    path = write(tmp_path, MINIMAL + f"parameters: {parameters}\n")
    with pytest.raises(IOConfigError, match=message):
        IOConfig.load(path)


def test_other_parameters_pass_through(tmp_path):
    path = write(tmp_path, MINIMAL + "parameters: {top_k: 5, extra_body: {a: [1, 2]}}\n")
    assert IOConfig.load(path).parameters_dict() == {"top_k": 5, "extra_body": {"a": [1, 2]}}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("docs_as_message: html", "docs_as_message"),
        ("sentence_boundaries: [c]", "sentence_boundaries"),
        ("sentence_boundaries: {last_message: 1}", "sentence_boundaries"),
        ("logprobs_workaround: sometimes", "logprobs_workaround"),
        ("name: 3", "'name'"),
        ("model: [a]", "'model'"),
        ("instruction: 5", "'instruction'"),
    ],
)
def test_bad_optional_values_are_refused(tmp_path, line, message):
    source = MINIMAL.replace("model: ~\n", "") if line.startswith("model") else MINIMAL
    path = write(tmp_path, source + line + "\n")
    with pytest.raises(IOConfigError, match=message):
        IOConfig.load(path)


# ----- bounded loading (io.yaml may come from the hub) ------------------------------------------


ALIAS_BOMB = "".join(
    f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)
ALIAS_BOMB = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + ALIAS_BOMB


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    assert len(ALIAS_BOMB) <= 460  # the 450-byte file of issue 28 D4
    path = write(tmp_path, "response_format: null\ntransformations: null\n" + ALIAS_BOMB)
    _, error = run_bounded(lambda: IOConfig.load(path), 5)
    assert isinstance(error, IOConfigError)
    assert str(path) in str(error) and "alias *a" in str(error) and "in full" in str(error)


@pytest.mark.parametrize(("text", "message"), [
    ("response_format: null\ntransformations: null\nmodel: &m x\nname: *m\n", "alias"),
    ("response_format: null\ntransformations: null\nparameters: " + "[" * 40 + "]" * 40,
     "deeper than 32"),
    ("response_format: '" + "[" * 50_000 + "]" * 50_000 + "'\ntransformations: null\n",
     "deeper than 32"),
    ("response_format: null\ntransformations: null\ninstruction: a\ninstruction: b\n",
     "'instruction' twice"),
    ("response_format: !!python/object/apply:os.system ['true']\ntransformations: null\n",
     "not valid YAML"),
])
def test_hostile_yaml_is_refused_naming_the_file(tmp_path, text, message):
    path = write(tmp_path, text)
    _, error = run_bounded(lambda: IOConfig.load(path), 5)
    assert isinstance(error, IOConfigError), error
    assert str(path) in str(error) and message in str(error)


def test_size_and_encoding_are_bounded(tmp_path):
    from mellea_local.adapters.io_config import MAX_IO_YAML_BYTES

    big = write(tmp_path, MINIMAL + "# " + "x" * MAX_IO_YAML_BYTES + "\n", "big.yaml")
    with pytest.raises(IOConfigError, match=r"big\.yaml is larger than"):
        IOConfig.load(big)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"response_format: null\n\xff\xfe\n")
    with pytest.raises(IOConfigError, match=r"bin\.yaml is not UTF-8"):
        IOConfig.load(binary)


def test_deep_dicts_are_refused_by_from_dict_too():
    deep: dict = {}
    node = deep
    for _ in range(2000):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(IOConfigError, match="deeper than"):
        IOConfig.from_dict({"response_format": deep, "transformations": None}, source="d")


def test_the_shipped_files_still_load():
    from mellea_local.adapters import default_library_roots

    files = [REQUIREMENT_CHECK_IO_YAML, *(p for root in default_library_roots()
                                          for p in root.rglob("io.yaml"))]
    assert len(files) >= 3
    for path in files:
        config = IOConfig.load(path)
        if "agent" in path.relative_to(path.parents[3]).parts[:1]:
            # An agent adapter decodes a tool-calling step: no instruction, no result rules.
            assert config.transformations is None and config.response_format is None
            continue
        assert config.transformations
