"""Chat messages and the conversions from a context to a flat chat history.

``Message`` is one chat turn; ``ToolMessage`` is a tool result linked to the call that asked
for it. ``as_chat_history`` is strict (only messages and outputs parsed into messages);
``as_generic_chat_history`` accepts any entry and turns unknown ones into text with a
formatter. Thinking and tool calls travel through both, so a backend can replay them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, get_args

from mellea_local.core.blocks import AudioBlock, AudioUrlBlock, CBlock, ImageBlock, ImageUrlBlock
from mellea_local.core.component import Component, Span, TemplateRepresentation
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.core.tool_call import ModelToolCall
from mellea_local.core.turn import ChatTurn
from mellea_local.errors import InputTypeError, InvalidInputError

if TYPE_CHECKING:
    from mellea_local.core.context import ChatContext, Context

logger = logging.getLogger(__name__)

Role = Literal["system", "user", "assistant", "tool"]
_ROLES: frozenset[str] = frozenset(get_args(Role))


def _checked_list(items: Sequence[Any] | None, kinds: tuple[type, ...], what: str) -> list[Any]:
    if items is None:
        return []
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise InputTypeError(f"Message {what} must be a list, got {type(items).__name__}.")
    for item in items:
        if not isinstance(item, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise InputTypeError(
                f"Message {what} must hold {names} objects, got {type(item).__name__}; "
                f"wrap the data in {kinds[0].__name__}(...)."
            )
    return list(items)


class Document(Component[str]):
    """A text passage attached to a message (e.g. a retrieved document for RAG)."""

    def __init__(self, text: str, title: str | None = None, doc_id: str | None = None):
        if not isinstance(text, str):
            raise InputTypeError(f"Document text must be a str, got {type(text).__name__}.")
        self.text = text
        self.title = title
        self.doc_id = doc_id

    def parts(self) -> list[Span]:
        return [CBlock(self.text)]

    def format_for_llm(self) -> TemplateRepresentation:
        return TemplateRepresentation(
            obj=self,
            args={"text": self.text, "title": self.title, "doc_id": self.doc_id},
            template_order=["*", "Document"],
        )

    def _parse(self, computed: ModelOutputThunk[Any]) -> str:
        return computed.value or ""

    def __repr__(self) -> str:
        return f"Document({self.text!r}, title={self.title!r}, doc_id={self.doc_id!r})"


class Message(Component["Message"], ChatTurn):
    """One chat turn: a role, text content and optional attachments and tool metadata.

    ``tool_calls`` are OpenAI-shaped dicts (``ModelToolCall`` objects are converted);
    ``tool_call_id`` links a ``role="tool"`` turn to the call it answers; ``thinking`` is the
    reasoning the model produced on this turn (None or empty when there is none).
    """

    Role = Role

    def __init__(
        self,
        role: Role,
        content: str,
        *,
        images: Sequence[ImageBlock | ImageUrlBlock] | None = None,
        audio: Sequence[AudioBlock | AudioUrlBlock] | None = None,
        documents: Sequence[Document | str] | None = None,
        tool_calls: Sequence[dict[str, Any] | ModelToolCall] | None = None,
        tool_call_id: str | None = None,
        thinking: str | None = None,
    ):
        if role not in _ROLES:
            raise InvalidInputError(
                f"Invalid role {role!r}: a Message role is one of {sorted(_ROLES)}; map other "
                "roles (e.g. 'developer', 'function') to one of these."
            )
        if not isinstance(content, str):
            raise InputTypeError(
                f"Message content must be a str, got {type(content).__name__}; convert it "
                "with str() or attach it as a document."
            )
        if thinking is not None and not isinstance(thinking, str):
            raise InputTypeError(
                f"Message thinking must be a str or None, got {type(thinking).__name__}."
            )
        if tool_call_id is not None and not isinstance(tool_call_id, str):
            raise InputTypeError(
                f"Message tool_call_id must be a str or None, got {type(tool_call_id).__name__} "
                f"({tool_call_id!r}); pass the id of the call this turn answers, as a str."
            )
        self.role: Role = role
        self._content_cblock = CBlock(content)
        self._images = _checked_list(images, (ImageBlock, ImageUrlBlock), "images") or None
        self._audio = _checked_list(audio, (AudioBlock, AudioUrlBlock), "audio") or None
        docs = _checked_list(documents, (Document, str), "documents")
        self._docs = [d if isinstance(d, Document) else Document(d) for d in docs] or None
        calls = _checked_list(tool_calls, (dict, ModelToolCall), "tool_calls")
        self._tool_calls = [
            c.as_chat_dict() if isinstance(c, ModelToolCall) else c for c in calls
        ] or None
        self._tool_call_id = tool_call_id
        self.thinking = thinking

    @property
    def content(self) -> str:
        return str(self._content_cblock)

    @property
    def images(self) -> list[ImageBlock | ImageUrlBlock] | None:
        return self._images

    @property
    def audio(self) -> list[AudioBlock | AudioUrlBlock] | None:
        return self._audio

    @property
    def documents(self) -> list[Document] | None:
        return self._docs

    @property
    def tool_calls(self) -> list[dict[str, Any]] | None:
        return self._tool_calls

    @property
    def tool_call_id(self) -> str | None:
        return self._tool_call_id

    def parts(self) -> list[Span]:
        """The content block, then documents, images and audio."""
        return [
            self._content_cblock,
            *(self._docs or []),
            *(self._images or []),
            *(self._audio or []),
        ]

    def format_for_llm(self) -> TemplateRepresentation:
        """A self-describing view: role, thinking and tool metadata are declared, not guessed."""
        return TemplateRepresentation(
            obj=self,
            args={"content": self._content_cblock, "documents": self._docs},
            template_order=["*", "Message"],
            images=self._images,
            audio=self._audio,
            role=self.role,
            thinking=self.thinking,
            tool_calls=self._tool_calls,
            tool_call_id=self._tool_call_id,
        )

    def _parse(self, computed: ModelOutputThunk[Any]) -> Message:
        """The model's answer to a message is an assistant message carrying its metadata."""
        calls = list(computed.tool_calls) if computed.tool_calls else None
        return Message(
            "assistant", computed.value or "", thinking=computed.thinking, tool_calls=calls
        )

    def _repr_fields(self) -> list[str]:
        fields = [f"role={_quoted(self.role)}", f"content={_quoted(self.content)}"]
        for name, items in (("images", self._images), ("audio", self._audio),
                            ("documents", self._docs), ("tool_calls", self._tool_calls)):
            if items:
                fields.append(f"{name}={len(items)}")
        if self._tool_call_id:
            fields.append(f"tool_call_id={_quoted(self._tool_call_id)}")
        return fields

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self._repr_fields())})"


def _quoted(text: str) -> str:
    """Double-quoted, escaped like JSON: the peer library's repr style."""
    return json.dumps(text, ensure_ascii=False)


class ToolMessage(Message):
    """The result of one tool call; ``tool_call_id`` comes from the ``ModelToolCall``."""

    def __init__(
        self,
        role: Role,
        content: str,
        tool_output: Any,
        name: str,
        args: dict[str, Any],
        tool: ModelToolCall,
    ):
        if not isinstance(tool, ModelToolCall):
            raise InputTypeError(
                f"ToolMessage tool must be the ModelToolCall it answers, got {type(tool).__name__}."
            )
        super().__init__(role, content, tool_call_id=tool.tool_call_id)
        self.name = name
        self.arguments = args
        self._tool_output = tool_output
        self._tool = tool

    @property
    def tool_output(self) -> Any:
        return self._tool_output

    def _repr_fields(self) -> list[str]:
        return [*super()._repr_fields(), f"name={_quoted(self.name)}"]

    @property
    def tool(self) -> ModelToolCall:
        return self._tool

    def format_for_llm(self) -> TemplateRepresentation:
        tr = super().format_for_llm()
        tr.args["name"] = self.name
        return tr


def message_from_template_representation(
    tr: TemplateRepresentation, *, default_role: str, content: str
) -> Message:
    """A Message from a component's representation; its declared role wins over the guess.

    Role validation is left to ``Message``. Thinking and tool calls are carried over, and
    ``tool_call_id`` too when the role is ``"tool"``.
    """
    role = tr.role if tr.role is not None else default_role
    return Message(
        role,  # type: ignore[arg-type]
        content,
        images=tr.images,
        audio=tr.audio,
        tool_calls=tr.tool_calls,
        tool_call_id=tr.tool_call_id if role == "tool" else None,
        thinking=tr.thinking,
    )


def _linear_entries(ctx: Context) -> list[Span]:
    entries = ctx.as_list()
    if entries is None:
        raise InvalidInputError(
            f"{type(ctx).__name__} holds a non-linear history that cannot be flattened into a "
            "chat; pick one branch (a linear context) first."
        )
    return entries


def _assistant_message(mot: ModelOutputThunk[Any], content: str) -> Message:
    calls = list(mot.tool_calls) if mot.tool_calls else None
    return Message("assistant", content, thinking=mot.thinking, tool_calls=calls)


def as_chat_history(ctx: Context) -> list[Message]:
    """The context as Messages, accepting only Messages and outputs parsed into Messages."""
    history: list[Message] = []
    for i, entry in enumerate(_linear_entries(ctx)):
        if isinstance(entry, Message):
            history.append(entry)
        elif isinstance(entry, ModelOutputThunk) and isinstance(entry.parsed_repr, Message):
            history.append(entry.parsed_repr)
        else:
            # Raised explicitly (not `assert`) so it survives `python -O`.
            raise AssertionError(
                "Could not render this context as a chat history: entry "
                f"{i} is {type(entry).__name__}, not a Message or a model output parsed into "
                "one. Use as_generic_chat_history for mixed contexts."
            )
    return history


def _default_formatter(obj: object) -> str:
    logger.warning(
        "as_generic_chat_history: Unknown component type %s, shown with str(); pass "
        "formatter= to control how it is shown.",
        type(obj).__name__,
    )
    return str(obj)


def as_generic_chat_history(
    ctx: Context, formatter: Callable[[object], str] | None = None
) -> list[Message]:
    """The context as Messages, turning entries of any kind into text where needed.

    Messages are kept as they are. A model output becomes an assistant message (its parsed
    Message, its str parse, its value, or the formatted parse). A plain CBlock is stringified
    and a CBlock subclass formatted, both as user turns. Other components are formatted; if
    they declare a representation, its role and tool metadata win.
    """
    fmt = formatter or _default_formatter
    history: list[Message] = []
    for entry in _linear_entries(ctx):
        if isinstance(entry, Message):
            history.append(entry)
        elif isinstance(entry, ModelOutputThunk):
            parsed = entry.parsed_repr
            if isinstance(parsed, Message):
                history.append(parsed)
            elif isinstance(parsed, str):
                history.append(_assistant_message(entry, parsed))
            elif parsed is None:
                if entry.value is None:
                    raise InvalidInputError(
                        "A ModelOutputThunk in the context has no value: was it evaluated? "
                        "Await mot.avalue() before converting the history."
                    )
                history.append(_assistant_message(entry, entry.value))
            else:
                history.append(_assistant_message(entry, fmt(parsed)))
        elif isinstance(entry, CBlock):
            text = str(entry) if type(entry) is CBlock else fmt(entry)
            history.append(Message("user", text))
        elif isinstance(entry, Component):
            text = fmt(entry)
            try:
                tr = entry.format_for_llm()
            except NotImplementedError:
                tr = None
            if isinstance(tr, TemplateRepresentation):
                history.append(
                    message_from_template_representation(tr, default_role="user", content=text)
                )
            else:
                history.append(Message("user", text))
        else:
            history.append(Message("user", fmt(entry)))
    return history


def chat_context(turns: Iterable[Any]) -> ChatContext:
    """A ``ChatContext`` holding ``turns`` in order: the one converter from data to a context.

    Each turn is a ``Message``, a mapping (``role``, ``content``, optional ``thinking`` or
    ``reasoning_content``) or a ``(role, content)`` / ``(role, content, thinking)`` tuple, as
    datasets, benchmarks and training rows hold them; ``Message`` checks each field.
    """
    from mellea_local.core.context import ChatContext

    ctx = ChatContext()
    for turn in turns:
        if isinstance(turn, Message):
            message = turn
        elif isinstance(turn, dict):
            message = Message(turn["role"], turn["content"],
                              thinking=turn.get("thinking", turn.get("reasoning_content")))
        else:
            role, content, *rest = turn
            message = Message(role, content, thinking=rest[0] if rest else None)
        ctx = ctx.add(message)
    return ctx
