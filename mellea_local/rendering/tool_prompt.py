"""Tools for any chat template: the Hermes/Qwen tool format written into the messages.

Why: many small chat models (SmolLM2's ChatML template among them) have no tool slot in their
chat template; ``apply_chat_template(tools=...)`` drops the tools silently and the model never
hears of them. For such a template the offered tools, the calls already made and their results
are written into the messages themselves, in one documented format, the same one the response
parser (``parsing.response``) and the tool-call grammar (``parsing.tool_grammar``) read:

* a system block (appended to the conversation's system turn, or a new first turn)::

      # Tools

      You may call one of the functions below. Their JSON schemas are within <tools></tools>:
      <tools>
      {"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}
      </tools>

      To call a function, write one JSON object with its name and arguments within
      <tool_call></tool_call> tags:
      <tool_call>
      {"name": <function-name>, "arguments": <args-json-object>}
      </tool_call>

* an assistant turn's calls appended to its content as ``<tool_call>`` blocks, the arguments
  exactly as the model wrote them; its thinking (when replayed) before them as
  ``<think>\\n...\\n</think>``;
* a tool result as a ``tool`` turn whose content is ``<tool_response>\\n...\\n</tool_response>``
  (a template that refuses or drops a ``tool`` role gets it as a ``user`` turn instead, merged
  with a user turn that follows, since strict templates reject two user turns in a row).

A template that renders tools itself (``template_renders_tools``) keeps its own format: nothing
here runs for it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mellea_local.rendering.memo import memoised
from mellea_local.rendering.sandbox import render_chat

__all__ = [
    "HERMES_FORMAT",
    "TEMPLATE_FORMAT",
    "hermes_messages",
    "needs_tool_prompt",
    "template_renders_tool_role",
    "template_renders_tools",
    "tool_call_text",
    "tool_format",
    "tools_system_text",
]

HERMES_FORMAT = "hermes"
"""The name of the format written here (``tool_format``)."""
TEMPLATE_FORMAT = "template"
"""The chat template's own tool format."""

TOOLS_HEADER = (
    "# Tools\n\nYou may call one of the functions below. Their JSON schemas are within "
    "<tools></tools>:\n<tools>\n"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nTo call a function, write one JSON object with its name and arguments "
    "within <tool_call></tool_call> tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

_PROBE_TOOL = {"type": "function", "function": {
    "name": "probe_tool_zq", "description": "A tool whose name appears nowhere else.",
    "parameters": {"type": "object", "properties": {}}}}
_PROBE_RESULT = "probe_result_zq"


def _probe(tokenizer: Any, kind: str, compute: Any) -> bool:
    key = (kind, getattr(tokenizer, "chat_template", None))
    try:
        hash(key)
    except TypeError:
        return bool(compute())
    return bool(memoised(tokenizer, "tool-probe", key, compute))


def template_renders_tools(tokenizer: Any) -> bool:
    """Whether the chat template shows the model the tools it is offered (``tools=``).

    Rendering one conversation with a probe tool tells the two kinds apart; a template that
    raises on ``tools=`` counts as one without a tool slot.
    """
    def compute() -> bool:
        chat = [{"role": "user", "content": "hi"}]
        try:
            text = render_chat(tokenizer, chat, tools=[_PROBE_TOOL], add_generation_prompt=True)
        except Exception:  # a template that cannot take tools at all
            return False
        return "probe_tool_zq" in str(text)

    return _probe(tokenizer, "tools", compute)


def template_renders_tool_role(tokenizer: Any) -> bool:
    """Whether the chat template renders a ``tool`` turn's content (ChatML does; strict
    user/assistant templates raise or drop it)."""
    def compute() -> bool:
        chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"},
                {"role": "tool", "content": _PROBE_RESULT}]
        try:
            text = render_chat(tokenizer, chat, add_generation_prompt=True)
        except Exception:
            return False
        return _PROBE_RESULT in str(text)

    return _probe(tokenizer, "tool-role", compute)


def tool_format(tokenizer: Any) -> str:
    """``"template"`` when the chat template renders tools itself, else ``"hermes"``."""
    return TEMPLATE_FORMAT if template_renders_tools(tokenizer) else HERMES_FORMAT


def tools_system_text(specs: Sequence[dict[str, Any]]) -> str:
    """The ``# Tools`` system block listing ``specs`` (one JSON function spec a line)."""
    lines = "\n".join(json.dumps(spec, ensure_ascii=False) for spec in specs)
    return TOOLS_HEADER + lines + TOOLS_FOOTER


def tool_call_text(name: str, arguments: Any) -> str:
    """One call as the format writes it; ``arguments`` as text is kept verbatim."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f'<tool_call>\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": ' \
           f"{raw}}}\n</tool_call>"


def needs_tool_prompt(tokenizer: Any, turns: Sequence[dict[str, Any]],
                      specs: Sequence[dict[str, Any]] | None) -> bool:
    """Whether this rendering must use the Hermes format: tools, calls or results are in it
    and the chat template would drop them."""
    involved = bool(specs) or any(
        t.get("tool_calls") or t.get("role") == "tool" for t in turns)
    return involved and not template_renders_tools(tokenizer)


def _assistant_text(turn: dict[str, Any], replay_thinking: bool) -> str:
    parts: list[str] = []
    thinking = turn.get("reasoning_content")
    if replay_thinking and thinking:
        parts.append(f"<think>\n{thinking}\n</think>")
    if turn.get("content"):
        parts.append(str(turn["content"]))
    for call in turn.get("tool_calls") or []:
        fn = call.get("function", call)
        parts.append(tool_call_text(fn["name"], fn.get("arguments", {})))
    return "\n".join(parts)


def hermes_messages(
    turns: Sequence[dict[str, Any]],
    specs: Sequence[dict[str, Any]] | None,
    *,
    tool_role: bool,
    replay_thinking: bool = True,
) -> list[dict[str, Any]]:
    """The message dicts with tools, calls, thinking and results written as text.

    ``tool_role``: the template renders ``tool`` turns (else results become user turns).
    ``replay_thinking``: earlier assistant turns keep their ``<think>`` block (the default:
    the prompt then extends the previous one token for token, so the KV cache serves it).
    """
    out: list[dict[str, Any]] = []
    for turn in turns:
        role = turn.get("role")
        if role == "assistant":
            out.append({"role": "assistant", "content": _assistant_text(turn, replay_thinking)})
        elif role == "tool":
            text = f"<tool_response>\n{turn.get('content', '')}\n</tool_response>"
            if tool_role:
                out.append({"role": "tool", "content": text})
            elif out and out[-1]["role"] == "user":
                out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n{text}"}
            else:
                out.append({"role": "user", "content": text})
        elif role == "user" and not tool_role and out and out[-1]["role"] == "user" and (
                str(out[-1]["content"]).endswith("</tool_response>")):
            out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n\n{turn['content']}"}
        else:
            out.append({k: v for k, v in turn.items() if k not in ("tool_calls",
                                                                  "reasoning_content")})
    if specs:
        block = tools_system_text(specs)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out
