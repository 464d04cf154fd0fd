"""Tool-argument validation against real pydantic and transformers schemas."""

from __future__ import annotations

import copy
import json
from enum import StrEnum
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError
from transformers.utils import get_json_schema

from mellea_local.errors import ToolError
from mellea_local.parsing.tool_schema import function_parameters, schema_errors, validate_arguments


class Color(StrEnum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str
    zip: str = Field(pattern=r"^[0-9]{5}$")


class TripArgs(BaseModel):
    city: str
    days: int = Field(1, ge=1, le=14)
    unit: Literal["c", "f"] = "c"
    ratio: float | None = None
    tags: list[str] = []
    address: Address | None = None
    color: Color = Color.RED
    confirm: bool = False


TRIP_SPEC = {
    "name": "plan_trip",
    "description": "Plan a trip.",
    "parameters": TripArgs.model_json_schema(),
}


def forecast(city: str, days: int | None = None) -> str:
    """Weather forecast.

    Args:
        city: The city.
        days: How many days ahead.
    """
    return city


def test_valid_arguments_pass_and_are_not_changed() -> None:
    arguments = {"city": "Paris", "address": {"street": "Rue 1", "zip": "75001"}}
    before = copy.deepcopy(arguments)
    assert validate_arguments(arguments, TRIP_SPEC) == []
    # No padding with defaults, no coercion: the dict is exactly what the model wrote.
    assert arguments == before


def test_no_coercion_of_strings_to_numbers_or_booleans() -> None:
    errors = validate_arguments({"city": "Paris", "days": "3", "confirm": "true"}, TRIP_SPEC)
    assert errors == [
        'arguments.days: expected integer, got string "3"',
        'arguments.confirm: expected boolean, got string "true"',
    ]


def test_missing_required_argument_is_named() -> None:
    assert validate_arguments({"days": 2}, TRIP_SPEC) == [
        "arguments.city: missing required argument"
    ]


def test_bounds_enum_and_nested_ref_are_checked() -> None:
    errors = validate_arguments(
        {
            "city": "Paris",
            "days": 30,
            "unit": "k",
            "color": "green",
            "address": {"street": "x", "zip": "7500"},
        },
        TRIP_SPEC,
    )
    assert "arguments.days: must be at most 14, got integer 30" in errors
    assert any(e.startswith('arguments.unit: string "k" is not one of') for e in errors)
    assert any(e.startswith('arguments.color: string "green" is not one of') for e in errors)
    # address is anyOf[$ref Address, null]: the failing branch's reason is reported.
    address_error = next(e for e in errors if e.startswith("arguments.address"))
    assert "arguments.address.zip: must match the pattern" in address_error


def test_pattern_dollar_means_end_of_input_as_in_json_schema() -> None:
    address = {"street": "x", "zip": "75001\n"}
    assert validate_arguments({"city": "P", "address": address}, TRIP_SPEC) != []
    with pytest.raises(ValidationError):
        TripArgs.model_validate({"city": "P", "address": address})


def test_booleans_are_not_numbers_and_ints_are_not_booleans() -> None:
    assert validate_arguments({"city": "P", "days": True}, TRIP_SPEC) == [
        "arguments.days: expected integer, got boolean true"
    ]
    assert schema_errors(1, {"enum": [True]}) != []
    assert schema_errors(True, {"enum": [1]}) != []
    assert schema_errors(1.0, {"enum": [1]}) == []
    assert schema_errors(3.0, {"type": "integer"}) == []  # JSON Schema: 3.0 is an integer
    assert schema_errors(3.5, {"type": "integer"}) != []


def test_transformers_get_json_schema_nullable_and_optional() -> None:
    spec = get_json_schema(forecast)  # OpenAI-wrapped {"type": "function", "function": ...}
    assert validate_arguments({"city": "Oslo"}, spec) == []
    assert validate_arguments({"city": "Oslo", "days": None}, spec) == []
    assert validate_arguments({"city": "Oslo", "days": "2"}, spec) == [
        'arguments.days: expected integer, got string "2"'
    ]


def test_type_lists_additional_properties_and_items() -> None:
    schema = {
        "type": "object",
        "properties": {
            "q": {"type": ["string", "null"]},
            "ids": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
        },
        "additionalProperties": False,
    }
    assert schema_errors({"q": None, "ids": [1, 2]}, schema, path="arguments") == []
    assert schema_errors({"q": 1}, schema, path="arguments") == [
        "arguments.q: expected string or null, got integer 1"
    ]
    assert schema_errors({"ids": [1, "2", 1]}, schema, path="arguments") == [
        'arguments.ids[1]: expected integer, got string "2"',
        "arguments.ids: items must be unique; integer 1 repeats",
    ]
    assert schema_errors({"extra key": 1}, schema, path="arguments") == [
        'arguments["extra key"]: unexpected argument (known: q, ids)'
    ]


def test_tool_without_parameters_takes_none() -> None:
    spec = {"name": "now", "description": "Current time."}
    assert validate_arguments({}, spec) == []
    assert validate_arguments({"tz": "UTC"}, spec) == [
        "arguments.tz: unexpected argument (known: none)"
    ]


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"type": "text"}, "unknown type"),
        ({"$ref": "#/$defs/Missing"}, "points at nothing"),
        ({"$ref": "https://example.com/s.json"}, "only local references"),
        ({"$ref": "#"}, "loops on itself"),
        ({"type": "string", "pattern": "("}, "not a valid regular expression"),
        ({"anyOf": []}, "non-empty list"),
    ],
)
def test_malformed_schema_raises_tool_error(schema: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ToolError, match=fragment):
        schema_errors("x", schema)


def test_non_mapping_spec_is_a_tool_error() -> None:
    with pytest.raises(ToolError, match="must be a mapping"):
        function_parameters(["city"])  # type: ignore[arg-type]


# --- agreement with pydantic ------------------------------------------------------------------

_WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-20, 20),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not x.is_integer()),
    st.text(max_size=6),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["street", "zip", "x"]), st.text(max_size=6), max_size=3),
)
_FIELDS = {
    "city": st.text(max_size=8),
    "days": st.integers(-5, 20),
    "unit": st.sampled_from(["c", "f", "k"]),
    "ratio": st.one_of(st.none(), st.floats(-1e6, 1e6).filter(lambda x: not x.is_integer())),
    "tags": st.lists(st.text(max_size=4), max_size=3),
    "address": st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {"street": st.text(max_size=4)},
            optional={"zip": st.from_regex(r"\A[0-9]{4,6}\Z")},
        ),
    ),
    "color": st.sampled_from(["red", "blue", "green"]),
    "confirm": st.booleans(),
}


@st.composite
def _trip_arguments(draw: st.DrawFn) -> dict[str, Any]:
    arguments = {}
    for name, right in _FIELDS.items():
        if draw(st.booleans()):
            arguments[name] = draw(st.one_of(right, _WRONG))
    return arguments


@settings(max_examples=300, deadline=None)
@given(_trip_arguments())
def test_verdict_agrees_with_pydantic_strict_json(arguments: dict[str, Any]) -> None:
    try:
        TripArgs.model_validate_json(json.dumps(arguments), strict=True)
        pydantic_ok = True
    except ValidationError:
        pydantic_ok = False
    assert (validate_arguments(arguments, TRIP_SPEC) == []) == pydantic_ok
