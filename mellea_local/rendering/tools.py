"""Tool definitions offered to the model, as JSON-schema function specs.

Tools come from three places, in this order (a later definition of a name wins): the
``ModelOption.TOOLS`` option, components in the context view that declare tools (so a goal's
tools stay available on every turn), and the action itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mellea_local.core.component import Component, Span
from mellea_local.errors import ToolError


def tool_spec(tool: Any) -> dict[str, Any]:
    """The ``{"type": "function", "function": {...}}`` dict for a tool object or dict.

    Accepts a tool wrapper exposing ``as_json_tool``, an OpenAI-shaped dict, or a bare function
    spec with ``name`` and ``parameters``. A plain Python function has no schema yet: wrap it.
    """
    spec = getattr(tool, "as_json_tool", None)
    if spec is not None:
        return dict(spec() if callable(spec) else spec)
    if isinstance(tool, Mapping):
        fn = tool.get("function", tool) if tool.get("type", "function") == "function" else None
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            return {"type": "function", "function": dict(fn)}
        raise ToolError(
            f"Tool dict {dict(tool)!r} is not a function spec; give "
            '{"type": "function", "function": {"name", "description", "parameters"}}.'
        )
    if callable(tool):
        raise ToolError(
            f"Tool {getattr(tool, '__name__', tool)!r} is a bare callable; wrap it with "
            "MelleaTool.from_callable(fn) so it carries a JSON schema."
        )
    raise ToolError(f"Cannot use a {type(tool).__name__} as a tool; pass a MelleaTool or a dict.")


def _tools_of(entry: Span | None) -> Iterable[Any]:
    if not isinstance(entry, Component):
        return ()
    try:
        tr = entry.format_for_llm()
    except NotImplementedError:
        return ()
    tools = getattr(tr, "tools", None)
    return tools.values() if isinstance(tools, Mapping) else (tools or ())


def collect_tools(
    option_tools: Iterable[Any] | Mapping[str, Any] | None,
    view: Iterable[Span],
    action: Span | None,
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Map each tool name to ``(tool object, function spec)``, later sources winning."""
    if isinstance(option_tools, Mapping):
        option_tools = option_tools.values()
    found: dict[str, tuple[Any, dict[str, Any]]] = {}
    sources: list[Iterable[Any]] = [option_tools or ()]
    sources += [_tools_of(entry) for entry in view]
    sources.append(_tools_of(action))
    for source in sources:
        for tool in source:
            spec = tool_spec(tool)
            found[spec["function"]["name"]] = (tool, spec)
    return found
