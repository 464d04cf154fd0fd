"""Tools from Python functions: a JSON schema for the model, a checked call for the agent loop.

The schema comes from the function itself (type hints, defaults, a Google-style docstring)
through a pydantic model, so what the model is shown and what a call is validated against can
never drift apart. Validation is strict and runs on the arguments exactly as the model wrote
them (pydantic's JSON mode: ``"3"`` is not an int), because a tool that silently receives
something the model never wrote teaches the model nothing. Arguments are never padded: an
optional parameter the model left out is left out of the call too, so the function's own
default applies.
"""

from __future__ import annotations

import abc
import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, overload

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from mellea_local.core.sync import run_sync
from mellea_local.errors import ToolArgumentsError, ToolError

__all__ = ["AbstractMelleaTool", "MelleaTool", "observation_text", "tool"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")
_SECTION = re.compile(
    r"(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Returns?|Yields?|"
    r"Raises|Examples?|Notes?|Attributes|See Also|Warnings?|Todo|References):\s*\Z"
)
_ARGS_SECTIONS = frozenset(
    {"Args", "Arguments", "Parameters", "Params", "Keyword Args", "Keyword Arguments"}
)
_ARG_LINE = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)\Z")
# Keys whose values are data, not schemas: their contents must not be cleaned.
_DATA_KEYS = frozenset({"default", "enum", "const", "examples"})
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})


class AbstractMelleaTool(abc.ABC):
    """What the agent loop and the renderer need from a tool: a name, a spec and ``run``.

    Subclass it to serve a hand-written schema; ``MelleaTool`` covers plain functions.
    """

    name: str

    @property
    @abc.abstractmethod
    def as_json_tool(self) -> dict[str, Any]:
        """``{"type": "function", "function": {"name", "description", "parameters"}}``."""

    @abc.abstractmethod
    def run(self, /, *args: Any, **kwargs: Any) -> Any:
        """Run the tool; may return an awaitable (``ModelToolCall.acall_func`` awaits it)."""


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description and the per-argument texts of a Google-style docstring."""
    description: list[str] = []
    args: dict[str, list[str]] = {}
    section: str | None = None
    entry_indent: int | None = None
    current: str | None = None
    for line in (doc or "").expandtabs().splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = _SECTION.match(stripped)
        if header and indent == 0:
            section, entry_indent, current = header.group(1), None, None
            continue
        if section is None:
            description.append(stripped)
            continue
        if section not in _ARGS_SECTIONS or not stripped:
            continue
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_LINE.match(stripped)
        if indent <= entry_indent and match:
            current = match.group(1)
            args[current] = [match.group(2).strip()]
        elif current is not None:
            args[current].append(stripped)
    paragraphs = " ".join(line or "\n" for line in description).split("\n")
    text = "\n".join(" ".join(p.split()) for p in paragraphs if p.strip())
    return text, {name: " ".join(" ".join(parts).split()) for name, parts in args.items()}


def _clean_schema(node: Any) -> Any:
    """Drop pydantic's generated titles and put ``type`` first in every schema object.

    Titles only repeat the names; small models read the spec token by token, and the embedded
    model family was trained on specs in exactly this shape.
    """
    if isinstance(node, list):
        return [_clean_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    if "type" in node:
        out["type"] = node["type"]
    for key, value in node.items():
        if key == "type" or (key == "title" and isinstance(value, str)):
            continue
        if key in _DATA_KEYS:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _clean_schema(sub) for name, sub in value.items()}
        else:
            out[key] = _clean_schema(value)
    return out


def _type_hints(fn: Callable[..., Any], name: str) -> dict[str, Any]:
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else type(fn).__call__
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:
        raise ToolError(
            f"Cannot read the type hints of tool {name!r} ({exc}); make every annotation "
            "importable where the function is defined."
        ) from exc


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe_errors(exc: pydantic.ValidationError) -> list[str]:
    problems = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(part) for part in err["loc"]) or "arguments"
        if err["type"] == "missing":
            problems.append(f"{where}: missing required argument")
        elif err["type"] == "extra_forbidden":
            problems.append(f"{where}: unexpected argument")
        else:
            problems.append(f"{where}: {err['msg']} (got {_short(err.get('input'))})")
    return problems


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ToolError(
            f"Tool name {name!r} is not usable: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or '_' (pass name= to from_callable)."
        )


class MelleaTool(AbstractMelleaTool):
    """A Python function offered to a model as a tool.

    Build it with :meth:`from_callable` or the :func:`tool` decorator. Calling the tool object
    calls the function unchanged; :meth:`run` is the model's entry point and validates first.
    """

    def __init__(
        self,
        name: str,
        func: Callable[..., Any],
        description: str,
        args_model: type[BaseModel],
    ) -> None:
        _check_name(name)
        self.name = name
        self.description = description
        self.args_model = args_model
        self._func = func
        parameters = _clean_schema(args_model.model_json_schema())
        for prop in parameters.get("properties", {}).values():
            # Every parameter carries a description, empty when the docstring has none (the
            # peer library's shape; chat templates print it either way).
            prop.setdefault("description", "")
        if parameters.get("additionalProperties") is False:
            # Extra arguments are still refused by run(); the spec stays in the shape models
            # are trained on (transformers' get_json_schema omits it too).
            del parameters["additionalProperties"]
        self._spec = {
            "type": "function",
            "function": {"name": name, "description": description, "parameters": parameters},
        }

    @classmethod
    def from_callable(
        cls,
        fn: Callable[..., Any],
        name: str | None = None,
        *,
        description: str | None = None,
    ) -> MelleaTool:
        """A tool whose schema comes from ``fn``'s signature and docstring.

        A parameter with a default is optional and its default is shown to the model; one
        without a type hint accepts any JSON value. The docstring's text before its sections
        is the tool's description (or pass ``description=``; empty without either); its
        ``Args:`` section describes the parameters. ``fn`` may be sync or async.
        """
        if not callable(fn):
            raise ToolError(f"A tool wraps a callable, got {type(fn).__name__}.")
        tool_name = name or getattr(fn, "__name__", None) or ""
        _check_name(tool_name)
        if description is not None and not isinstance(description, str):
            raise ToolError(
                f"Tool {tool_name!r}: description must be a str (what the model reads about "
                f"the tool), got {type(description).__name__}; pass a sentence or leave it out."
            )
        target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else type(fn).__call__
        if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
            raise ToolError(
                f"Tool {tool_name!r} is a generator function: calling it runs nothing and the "
                "model would read '<generator object ...>'. Return the values as a list (e.g. "
                "`return list(...)`) instead of yielding them."
            )
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise ToolError(
                f"Cannot read the signature of {tool_name or fn!r} ({exc}); wrap it in a def "
                "with named, annotated parameters."
            ) from exc
        hints = _type_hints(fn, tool_name)
        doc_text, arg_docs = _parse_docstring(inspect.getdoc(fn))
        fields: dict[str, Any] = {}
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ToolError(
                    f"Tool {tool_name!r} takes *{param.name}; a model can only pass named "
                    "arguments, so list each parameter explicitly."
                )
            if param.kind is param.POSITIONAL_ONLY:
                raise ToolError(
                    f"Tool {tool_name!r} has the positional-only parameter {param.name!r}; "
                    "tools are called with keyword arguments, so drop the '/'."
                )
            if param.name.startswith("_"):
                raise ToolError(
                    f"Parameter {param.name!r} of tool {tool_name!r} starts with '_', which "
                    "pydantic keeps private; rename it."
                )
            default = ... if param.default is param.empty else param.default
            doc = arg_docs.get(param.name)
            # No description= at all without a docstring entry: an Annotated[..., Field(
            # description=...)] must not be overwritten by None.
            info = Field(default, description=doc) if doc else Field(default)
            fields[param.name] = (hints.get(param.name, Any), info)
        text = description if description is not None else doc_text
        model_name = re.sub(r"\W", "_", tool_name) or "tool"
        try:
            args_model = pydantic.create_model(
                f"{model_name}_arguments",
                __config__=ConfigDict(
                    extra="forbid", arbitrary_types_allowed=False, protected_namespaces=(),
                    # 1e400 in a model's JSON parses as inf: a number no tool means; refused.
                    allow_inf_nan=False,
                ),
                **fields,
            )
            args_model.model_json_schema()
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError,
                NameError) as exc:
            raise ToolError(
                f"Tool {tool_name!r} has a parameter type with no JSON schema ({exc}); use "
                "JSON-like types (str, int, float, bool, list, dict, Literal, Enum, pydantic "
                "models)."
            ) from exc
        return cls(tool_name, fn, text, args_model)

    @property
    def as_json_tool(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._spec))  # a deep copy: callers may edit theirs

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments."""
        return self.as_json_tool["function"]["parameters"]

    @property
    def func(self) -> Callable[..., Any]:
        return self._func

    @property
    def is_async(self) -> bool:
        fn = self._func
        target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else type(fn).__call__
        return inspect.iscoroutinefunction(target)

    def argument_errors(self, args: Mapping[str, Any]) -> list[str]:
        """Every way ``args`` breaks this tool's parameters; empty when they conform."""
        try:
            self.parse_arguments(args)
        except ToolArgumentsError as exc:
            return exc.problems
        return []

    def parse_arguments(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments to call the function with, validated strictly.

        Only the arguments given are returned (no defaults filled in). Raises
        ``ToolArgumentsError`` naming each problem (``exc.problems`` lists them).
        """
        if not isinstance(args, Mapping):
            problems = [f"arguments: expected an object, got {_short(args)}"]
        else:
            try:
                try:
                    payload = json.dumps(dict(args))
                except (TypeError, ValueError):  # Python objects passed directly, not by a model
                    parsed = self.args_model.model_validate(dict(args), strict=True)
                else:
                    parsed = self.args_model.model_validate_json(payload, strict=True)
            except pydantic.ValidationError as exc:
                problems = _describe_errors(exc)
            else:
                return {key: getattr(parsed, key) for key in parsed.model_fields_set}
        message = (
            f"Invalid arguments for tool {self.name!r}: " + "; ".join(problems) + ". Call "
            f"{self.name} again with arguments matching its parameters: "
            + json.dumps(self.parameters, ensure_ascii=False)
        )
        raise ToolArgumentsError(message, problems)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Positional arguments named by the signature's order, merged with the keywords."""
        if not args:
            return kwargs
        names = list(self.args_model.model_fields)
        if len(args) > len(names):
            raise ToolArgumentsError(
                f"Tool {self.name!r} takes {len(names)} argument(s), got {len(args)} "
                "positional; pass them by name.",
                [f"arguments: {len(args)} positional for {len(names)} parameter(s)"],
            )
        twice = [n for n in names[: len(args)] if n in kwargs]
        if twice:
            raise ToolArgumentsError(
                f"Tool {self.name!r}: {twice} given twice, by position and by name; pass "
                "each once.",
                [f"{n}: given twice" for n in twice],
            )
        return {**dict(zip(names, args, strict=False)), **kwargs}

    def _checked(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | str:
        try:
            return self.parse_arguments(self._bind(args, kwargs))
        except ToolArgumentsError as exc:
            return str(exc)

    def run(self, /, *args: Any, **kwargs: Any) -> Any:
        """Validate, then call the function; an async one is run to completion.

        Positional arguments follow the signature's order. Invalid arguments do not reach the
        function: the result is then the text explaining them, which the agent loop shows the
        model as the observation. Inside a running event loop, await ``arun`` instead: ``run``
        then drives an async tool on a helper thread, blocking the loop meanwhile.
        """
        call_kwargs = self._checked(args, kwargs)
        if isinstance(call_kwargs, str):
            return call_kwargs
        result = self._func(**call_kwargs)
        if inspect.iscoroutine(result):
            return run_sync(result, thread_name="mellea-local-tool")
        return result

    async def arun(self, /, *args: Any, **kwargs: Any) -> Any:
        """``run`` for async callers: awaits the function when it is a coroutine function."""
        call_kwargs = self._checked(args, kwargs)
        if isinstance(call_kwargs, str):
            return call_kwargs
        result = self._func(**call_kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly, unvalidated (the decorated function stays usable)."""
        return self._func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"MelleaTool({self.name!r})"


@overload
def tool(fn: Callable[..., Any], /) -> MelleaTool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], MelleaTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> MelleaTool | Callable[[Callable[..., Any]], MelleaTool]:
    """Decorator form of ``MelleaTool.from_callable``: ``@tool`` or ``@tool(name="x")``."""
    if fn is not None:
        return MelleaTool.from_callable(fn, name, description=description)

    def wrap(f: Callable[..., Any]) -> MelleaTool:
        return MelleaTool.from_callable(f, name, description=description)

    return wrap


def observation_text(output: Any) -> str:
    """A tool's return value as the text the model reads back.

    Strings stay as they are; JSON-like values and pydantic models become JSON (a Python repr
    such as ``{'a': 1}`` is not what models are trained to read); anything else is ``str()``.
    """
    if isinstance(output, str):
        return output
    if isinstance(output, BaseModel):
        return output.model_dump_json()
    if output is None or isinstance(output, (dict, list, tuple, int, float, bool)):
        try:
            return json.dumps(output, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            pass
    return str(output)
