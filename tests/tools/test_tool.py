"""MelleaTool: schemas from Python functions, strict validated calls, the decorator."""

from __future__ import annotations

import asyncio
import enum
import json
from typing import Annotated, Any, Literal

import pydantic
import pytest

from mellea_local.core.tool_call import ModelToolCall
from mellea_local.errors import ToolArgumentsError, ToolError
from mellea_local.rendering.tools import tool_spec
from mellea_local.tools import MelleaTool, observation_text, tool


def search(query: str, limit: int = 5, exact: bool | None = None) -> list[str]:
    """Search the notes for a phrase.

    Matching is case-insensitive.

    Args:
        query: The phrase to find.
        limit (int): How many hits to return;
            fewer when there are fewer.
        exact: Match whole words only.

    Returns:
        The matching notes.
    """
    return [query] * limit


def test_schema_comes_from_hints_defaults_and_docstring():
    spec = MelleaTool.from_callable(search).as_json_tool
    assert spec == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the notes for a phrase.\nMatching is case-insensitive.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "The phrase to find."},
                    "limit": {
                        "type": "integer",
                        "default": 5,
                        "description": "How many hits to return; fewer when there are fewer.",
                    },
                    "exact": {
                        "anyOf": [{"type": "boolean"}, {"type": "null"}],
                        "default": None,
                        "description": "Match whole words only.",
                    },
                },
                "required": ["query"],
            },
        },
    }


def test_the_renderer_accepts_the_tool_as_it_is():
    t = MelleaTool.from_callable(search)
    assert tool_spec(t) == t.as_json_tool
    # A copy: editing it does not change the tool.
    t.as_json_tool["function"]["name"] = "changed"
    assert t.name == "search" and t.as_json_tool["function"]["name"] == "search"


def test_optional_arguments_the_model_left_out_are_not_passed():
    seen: list[dict[str, Any]] = []

    def record(a: int, b: int = 7, c: str | None = None) -> str:
        """Record the call.

        Args:
            a: First.
        """
        seen.append({"a": a, "b": b, "c": c})
        return "ok"

    t = MelleaTool.from_callable(record)
    assert t.parse_arguments({"a": 1}) == {"a": 1}  # nothing padded
    assert t.run(a=1) == "ok"
    assert seen == [{"a": 1, "b": 7, "c": None}]  # the function's own defaults applied
    assert t.parameters["required"] == ["a"]


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"query": 3}, "query: Input should be a valid string (got 3)"),
        ({"query": "x", "limit": "3"}, 'limit: Input should be a valid integer (got "3")'),
        ({"query": "x", "limit": 2.5}, "limit: Input should be a valid integer"),
        ({}, "query: missing required argument"),
        ({"query": "x", "colour": "red"}, "colour: unexpected argument"),
    ],
)
def test_invalid_arguments_become_an_observation_and_never_reach_the_function(args, problem):
    calls = []

    def guarded(query: str, limit: int = 5) -> str:
        """Guarded search."""
        calls.append(query)
        return "ran"

    t = MelleaTool.from_callable(guarded)
    out = t.run(**args)
    assert isinstance(out, str) and out.startswith("Invalid arguments for tool 'guarded': ")
    assert problem in out
    assert json.dumps(t.parameters) in out  # the model is told what to pass instead
    assert calls == []
    with pytest.raises(ToolArgumentsError) as err:
        t.parse_arguments(args)
    assert any(problem in p for p in err.value.problems)
    assert t.argument_errors(args) == err.value.problems


class Opaque:
    """A type pydantic has no JSON schema for."""


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(pydantic.BaseModel):
    x: int
    y: int


def test_strict_validation_does_not_coerce_but_accepts_json_shapes():
    def paint(colour: Colour, at: Point, size: Literal["s", "m"], ratio: float) -> str:
        """Paint a dot."""
        return f"{colour.value} {at.x},{at.y} {size} {ratio}"

    t = MelleaTool.from_callable(paint)
    assert t.run(colour="red", at={"x": 1, "y": 2}, size="m", ratio=2) == "red 1,2 m 2.0"
    assert "colour" in t.run(colour="green", at={"x": 1, "y": 2}, size="m", ratio=1.0)
    assert "at.x" in t.run(colour="red", at={"x": "1", "y": 2}, size="m", ratio=1.0)
    assert "Point" in json.dumps(t.parameters["$defs"])
    assert "title" not in json.dumps(t.parameters["$defs"]["Point"]["properties"])


def test_a_property_named_title_is_kept_while_generated_titles_go():
    def note(title: str, body: str = "") -> str:
        """Write a note."""
        return title

    props = MelleaTool.from_callable(note).parameters["properties"]
    assert list(props) == ["title", "body"]
    assert props["title"] == {"type": "string", "description": ""}
    assert props["body"] == {"type": "string", "default": "", "description": ""}


async def test_async_functions_run_through_model_tool_call():
    async def slow_add(a: int, b: int) -> int:
        """Add two integers, slowly."""
        await asyncio.sleep(0)
        return a + b

    t = MelleaTool.from_callable(slow_add)
    assert t.is_async
    assert await ModelToolCall("slow_add", t, {"a": 2, "b": 3}).acall_func() == 5
    assert await t.arun(a=1, b=1) == 2
    # Invalid arguments are reported without awaiting anything.
    assert "b: missing required argument" in await ModelToolCall(
        "slow_add", t, {"a": 2}).acall_func()
    # A MelleaTool drives its coroutine itself (on a helper thread under a running loop).
    assert ModelToolCall("slow_add", t, {"a": 2, "b": 3}).call_func() == 5


def test_sync_functions_run_through_model_tool_call():
    t = MelleaTool.from_callable(search)
    assert ModelToolCall("search", t, {"query": "q", "limit": 2}).call_func() == ["q", "q"]
    assert not t.is_async


def test_decorator_with_and_without_arguments_and_the_function_stays_callable():
    @tool
    def double(n: int) -> int:
        """Double a number."""
        return 2 * n

    @tool(name="triple_it", description="Triple a number.")
    def triple(n: int) -> int:
        return 3 * n

    assert isinstance(double, MelleaTool) and double.name == "double"
    assert double(4) == 8 and double.run(n=4) == 8
    assert triple.name == "triple_it"
    assert triple.as_json_tool["function"]["description"] == "Triple a number."
    assert triple.run(n=2) == 6


def test_annotated_field_descriptions_are_used():
    def pick(n: Annotated[int, pydantic.Field(ge=1, description="How many.")]) -> int:
        """Pick some."""
        return n

    t = MelleaTool.from_callable(pick)
    assert t.parameters["properties"]["n"] == {
        "type": "integer", "description": "How many.", "minimum": 1}
    assert "n: Input should be greater than or equal to 1" in t.run(n=0)


def test_a_function_without_parameters_takes_an_empty_object():
    def now() -> str:
        """Tell the time."""
        return "noon"

    t = MelleaTool.from_callable(now)
    assert t.parameters == {"type": "object", "properties": {}}
    assert t.run() == "noon"
    assert "unexpected argument" in t.run(x=1)


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda x: x, "not usable"),
        (print, "takes"),
    ],
)
def test_unusable_callables_are_refused(fn, match):
    with pytest.raises(ToolError, match=match):
        MelleaTool.from_callable(fn)


def test_definition_errors_name_the_fix():
    def variadic(*items: int) -> int:
        """Sum."""
        return sum(items)

    def untyped(x) -> int:  # type: ignore[no-untyped-def]
        """Untyped."""
        return x

    def undocumented(x: int) -> int:
        return x

    def positional(x: int, /) -> int:
        """Positional."""
        return x

    def weird(x: Opaque) -> int:
        """Weird type."""
        return 0

    with pytest.raises(ToolError, match=r"\*items"):
        MelleaTool.from_callable(variadic)
    assert MelleaTool.from_callable(undocumented, description="Identity.").run(x=1) == 1
    with pytest.raises(ToolError, match="positional-only"):
        MelleaTool.from_callable(positional)
    with pytest.raises(ToolError, match="name"):
        MelleaTool.from_callable(undocumented, name="has space", description="x")
    with pytest.raises(ToolError, match="JSON schema"):
        MelleaTool.from_callable(weird)


def test_methods_and_callable_objects_work():
    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def bump(self, by: int = 1) -> int:
            """Bump the counter."""
            self.n += by
            return self.n

    c = Counter()
    t = MelleaTool.from_callable(c.bump)
    assert list(t.parameters["properties"]) == ["by"]
    assert t.run(by=2) == 2 and c.n == 2


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", "plain"),
        (27, "27"),
        ({"a": [1, "é"]}, '{"a": [1, "é"]}'),
        (None, "null"),
        (True, "true"),
        ((1, 2), "[1, 2]"),
    ],
)
def test_observation_text(value, text):
    assert observation_text(value) == text


def test_observation_text_of_models_and_objects():
    assert observation_text(Point(x=1, y=2)) == '{"x":1,"y":2}'
    assert observation_text(ValueError("boom")) == "boom"


def test_an_argument_named_self_is_reported_not_crashed_on():
    t = MelleaTool.from_callable(search)
    assert "self: unexpected argument" in t.run(query="q", self=1)
    assert "self: unexpected argument" in ModelToolCall(
        "search", t, {"query": "q", "self": 1}).call_func()


def test_private_parameter_names_are_refused():
    def hidden(_secret: int) -> int:
        """Hidden."""
        return _secret

    with pytest.raises(ToolError, match="starts with '_'"):
        MelleaTool.from_callable(hidden)


def test_undocumented_and_unannotated_functions_become_tools_with_what_can_be_derived():
    def untyped(q, limit=3):
        return f"{q}:{limit}"

    t = MelleaTool.from_callable(untyped)
    spec = t.as_json_tool["function"]
    assert spec["description"] == ""
    assert spec["parameters"]["required"] == ["q"]
    assert spec["parameters"]["properties"]["q"] == {"description": ""}
    assert spec["parameters"]["properties"]["limit"] == {"default": 3, "description": ""}
    # No hint: any JSON value is accepted, unknown names are still refused.
    assert t.run("a") == "a:3" and t.run(q=[1], limit=4) == "[1]:4"
    assert "unexpected argument" in t.run(q="a", other=1)


def test_run_takes_positional_arguments_in_signature_order():
    @tool
    def span(start: int, end: int, step: int = 1) -> list[int]:
        """A range."""
        return list(range(start, end, step))

    assert span.run(1, 4) == [1, 2, 3]
    assert span.run(0, 6, step=2) == [0, 2, 4]
    assert "start: Input should be a valid integer" in span.run("1", 4)
    assert "given twice" in span.run(1, 4, start=2)
    assert "positional" in span.run(1, 2, 3, 4)


async def _slow_double(n: int) -> int:
    """Double n, asynchronously."""
    await asyncio.sleep(0)
    return 2 * n


async def _boom() -> str:
    """Fail."""
    raise RuntimeError("boom")


def test_run_drives_an_async_tool_to_completion_from_sync_code():
    t = tool(_slow_double)
    assert t.is_async
    assert t.run(4) == 8 and t.run(n=5) == 10
    with pytest.raises(RuntimeError, match="boom"):
        tool(_boom).run()
    sync_twin = MelleaTool.from_callable(lambda n: n, "_slow_double")
    assert tool(_slow_double).parameters["required"] == sync_twin.parameters["required"]


async def test_async_tool_inside_a_running_loop_run_and_arun_agree():
    t = tool(_slow_double)
    assert await t.arun(3) == 6
    assert t.run(3) == 6  # on a helper thread: the running loop is not re-entered
    call = ModelToolCall("_slow_double", t, {"n": 7})
    assert await call.acall_func() == 14 and call.call_func() == 14
