"""Property-based fuzzing of the parsers that read model output and adapter files.

Invariants: any input ends in a result or a typed ``MelleaLocalError`` (never a raw exception,
never a hang), and what can round-trip does. The default run draws ``FAST`` examples per
property (a few hundred in all); ``-m slow`` draws ``SLOW`` per property (>= 10,000 in all).
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mellea_local.adapters.io_config import IOConfig
from mellea_local.errors import MelleaLocalError
from mellea_local.parsing import ParsedResponse, parse_response
from mellea_local.requirements import requirement_check_score, requirement_check_to_bool

FAST, SLOW = 60, 2100
SIZES = [pytest.param(FAST, id="fast"), pytest.param(SLOW, id="slow", marks=pytest.mark.slow)]

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)
# Pieces that steer random text into the parsers' interesting branches.
MARKUP = ["<think>", "</think>", "<tool_call>", "</tool_call>", '{"name": ', '"arguments": ',
          "{", "}", "[", "]", '"', "\\", ",", ":", "NaN", "Infinity", "\x00", "\ud800",
          "\u202e", '{"requirement_check": {"score": ', "0.5", "1e400", "-0.0"]
model_text = st.lists(st.sampled_from(MARKUP) | st.text(max_size=10), max_size=14).map("".join)
TOOLS = {"add": {"name": "add", "description": "Add.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"]}}}


def run(strategy, size, check):
    """Run ``check`` on ``size`` examples of ``strategy``."""
    given(strategy)(settings(max_examples=size, deadline=None, derandomize=True,
                             suppress_health_check=list(HealthCheck))(check))()


def _typed_or(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except MelleaLocalError:
        return None


@pytest.mark.parametrize("size", SIZES)
def test_response_parser_never_raises_on_model_text(size):
    def check(text):
        for tools in (None, TOOLS):
            for started in (False, True):
                parsed = parse_response(text, tools=tools, thinking_started=started)
                assert isinstance(parsed, ParsedResponse) and isinstance(parsed.content, str)
                for call in parsed.tool_calls:
                    assert isinstance(call.name, str) and isinstance(call.arguments, dict)
                    assert isinstance(call.raw_arguments, str)
    run(model_text, size, check)


names = st.from_regex(r"[a-z_][a-z0-9_]{0,11}", fullmatch=True)
arguments = st.dictionaries(st.text(min_size=1, max_size=8), json_values, max_size=4)


@pytest.mark.parametrize("size", SIZES)
def test_tool_calls_round_trip_through_the_parser(size):
    def check(case):
        name, args, before, indent = case
        raw = json.dumps(args, indent=indent)
        if any(isinstance(v, float) and not math.isfinite(v) for v in _leaves(args)):
            return  # NaN/Infinity are refused as arguments; covered by the test above
        text = f'{before}<tool_call>{{"name": {json.dumps(name)}, "arguments": {raw}}}</tool_call>'
        parsed = parse_response(text)
        assert [c.name for c in parsed.tool_calls] == [name]
        [call] = parsed.tool_calls
        assert call.arguments == args and call.raw_arguments == raw and call.error is None
        assert parsed.content.strip() == before.strip()
    prose = st.text(alphabet=st.characters(blacklist_characters="<{"), max_size=20)
    run(st.tuples(names, arguments, prose, st.sampled_from([None, 2])), size, check)


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


@pytest.mark.parametrize("size", SIZES)
def test_score_parser_reads_scores_or_raises_typed(size):
    def check(text):
        score = _typed_or(requirement_check_score, text)
        if score is not None:
            assert 0.0 <= score <= 1.0
            assert requirement_check_to_bool(text) == (score > 0.5)
    run(model_text | json_values.map(json.dumps), size, check)


@pytest.mark.parametrize("size", SIZES)
def test_score_parser_round_trips_every_valid_score(size):
    def check(p):
        text = json.dumps({"requirement_check": {"score": p}})
        assert requirement_check_score(text) == p
        assert requirement_check_to_bool(text) == (p > 0.5)
    run(st.floats(0.0, 1.0), size, check)


yaml_text = st.lists(st.sampled_from([
    "response_format: ", "transformations:\n", "  - type: likelihood\n",
    "    categories_to_values: ",
    "{", "}", "[", "]", "&a ", "*a ", "!!python/object:os.system ", "'", '"', "\n", "  ", "- ",
    "instruction: ", "parameters:\n", "max_completion_tokens: ", "{requirement}", "\t", "\x00",
]) | st.text(max_size=8), max_size=16).map("".join)


@pytest.mark.parametrize("size", SIZES)
def test_io_yaml_loader_returns_a_config_or_a_typed_error(size, tmp_path):
    path = tmp_path / "io.yaml"

    def check(text):
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        config = _typed_or(IOConfig.load, path)
        assert config is None or isinstance(config, IOConfig)
        _typed_or(IOConfig.from_dict, {"response_format": text, "transformations": None})
    run(yaml_text, size, check)
