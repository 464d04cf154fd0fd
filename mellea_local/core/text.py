"""The text a component shows a model, from its own representation.

Core needs it to estimate what an entry costs (``ChatContext``'s token bound) and rendering
needs it to build chat turns; it depends on the component protocol only, so it lives here and
rendering imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jinja2

from mellea_local.core.component import Component
from mellea_local.errors import InputTypeError

_JINJA = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False)


def component_text(component: Component[Any]) -> str:
    """The text a component shows the model.

    An inline ``template`` is rendered with the representation's args; otherwise the
    ``content`` arg (or, failing that, the non-empty args in order) is the text.
    """
    tr = component.format_for_llm()
    if isinstance(tr, str):
        return tr
    if tr.template:
        return _JINJA.from_string(tr.template).render(**tr.args)
    if "content" in tr.args:
        return with_documents(str(tr.args["content"] or ""), tr.args.get("documents"))
    return "\n".join(str(v) for v in tr.args.values() if v not in (None, "", [], {}))


def with_documents(content: str, documents: Iterable[Any] | None) -> str:
    """Documents are rendered inline after the content, one labelled block each."""
    blocks = [content] if content else []
    for i, doc in enumerate(documents or []):
        doc_id = getattr(doc, "doc_id", None) or str(i)
        title = getattr(doc, "title", None)
        text = getattr(doc, "text", str(doc))
        blocks.append(f"[Document {doc_id}]\n" + (f"{title}: {text}" if title else text))
    return "\n\n".join(blocks)


def unrenderable(entry: object) -> InputTypeError:
    """The error for a context entry no renderer can turn into a chat turn."""
    return InputTypeError(
        f"Cannot render a {type(entry).__name__} as a chat turn; put Messages, "
        "components or model outputs in the context."
    )
