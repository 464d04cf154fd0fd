"""One generation request rendered: context + action + options -> prompt ids, tools, kwargs.

Shared by every backend that renders with our own chat template and tokenizer
(``LocalHFBackend``, ``LlamaServerBackend``), so both feed a model exactly the same token ids
for the same call: the KV reuse of either, and the equality tests between them, depend on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mellea_local.core.component import Span
from mellea_local.core.context import Context
from mellea_local.errors import InvalidInputError
from mellea_local.inputs import check_context
from mellea_local.messages import Message
from mellea_local.options import ModelOption, check_token_options, merge_options, split_options
from mellea_local.rendering.chat import to_chat_messages, to_template_input
from mellea_local.rendering.prompt import check_prompt_fits, check_text_only, render_prompt_ids
from mellea_local.rendering.tool_prompt import (
    hermes_messages,
    needs_tool_prompt,
    template_renders_tool_role,
)
from mellea_local.rendering.tools import collect_tools


def render_request(
    tokenizer: Any,
    action: Span | None,
    ctx: Context,
    *,
    base_options: Mapping[str, Any] | None,
    model_options: Mapping[str, Any] | None,
    model_id: str,
    positions: tuple[int, str] | None,
    tool_calls: bool = False,
    add_generation_prompt: bool = True,
) -> tuple[list[int], dict[str, tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """Token ids for ``ctx`` + ``action``, the tools offered, and the generate() kwargs.

    ``base_options`` are the backend's own defaults, ``model_options`` the call's;
    ``positions`` is the model's position limit and where it comes from
    (``position_limit``; None: unknown, not checked).
    """
    check_context(ctx, "ctx")
    opts = merge_options(base_options, model_options)
    view = list(ctx.view_for_generation() or [])
    entries = [*view, action] if action is not None else view
    messages = to_chat_messages(entries)
    if not messages:
        raise InvalidInputError(
            "Nothing to generate from: the action is None and ctx holds no messages; pass "
            "an action (e.g. Message('user', '...')) or a context with the conversation."
        )
    system = opts.get(ModelOption.SYSTEM_PROMPT)
    if system:
        messages.insert(0, Message("system", str(system)))
    check_text_only(messages, model_id)
    tools = collect_tools(opts.get(ModelOption.TOOLS), view, action) if tool_calls else {}
    gen_kwargs, tmpl_kwargs = split_options(opts, tokenizer.chat_template)
    check_token_options(gen_kwargs, len(tokenizer))
    # Documents go where intrinsics put them too (``place_documents``): their cache reuse
    # after a RAG generation depends on it. ``documents`` is never a user template option.
    turns, doc_kwargs = to_template_input(messages, tokenizer.chat_template)
    specs: list[dict[str, Any]] | None = [spec for _, spec in tools.values()] or None
    replay = opts.get(ModelOption.REPLAY_THINKING)
    if needs_tool_prompt(tokenizer, turns, specs):
        # No tool slot in the template: tools, calls and results written as Hermes text.
        turns = hermes_messages(turns, specs, tool_role=template_renders_tool_role(tokenizer),
                                replay_thinking=replay is not False)
        specs = None
    elif replay is False:
        turns = [{k: v for k, v in t.items() if k != "reasoning_content"} for t in turns]
    ids = render_prompt_ids(
        tokenizer,
        turns,
        specs,
        {**tmpl_kwargs, **doc_kwargs},
        add_generation_prompt=add_generation_prompt,
    )
    check_prompt_fits(len(ids), positions, model_id, generating=add_generation_prompt)
    return ids, tools, gen_kwargs
