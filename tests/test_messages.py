"""Message, ToolMessage and the context -> chat history conversions (seed 000)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mellea_local.core.blocks import CBlock, ImageUrlBlock
from mellea_local.core.component import Component, TemplateRepresentation
from mellea_local.core.context import ChatContext
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.core.tool_call import ModelToolCall
from mellea_local.messages import (
    Document,
    Message,
    ToolMessage,
    as_chat_history,
    as_generic_chat_history,
    message_from_template_representation,
)


def chat(*entries) -> ChatContext:
    return ChatContext().with_history(entries)


def fields(m: Message) -> tuple:
    return (m.role, m.content, m.thinking, m.tool_calls, m.tool_call_id)


def add(a: int, b: int) -> int:
    return a + b


class Shout(Component[str]):
    """A component with a declared representation (role and tool metadata)."""

    def __init__(self, role: str | None = None):
        self.role = role

    def parts(self):
        return []

    def format_for_llm(self):
        return TemplateRepresentation(
            obj=self, role=self.role, thinking="why", tool_call_id="c7", tool_calls=None
        )

    def _parse(self, computed):
        return computed.value

    def __str__(self) -> str:
        return "SHOUT"


class Opaque(Component[str]):
    """A component that cannot describe itself (like an intrinsic)."""

    def parts(self):
        return []

    def format_for_llm(self):
        raise NotImplementedError

    def _parse(self, computed):
        return ""


class Tagged(CBlock):
    pass


# ----- Message ---------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["system", "user", "assistant", "tool"])
def test_valid_roles(role):
    assert Message(role, "x").role == role


@pytest.mark.parametrize("role", ["developer", "User", "", None])
def test_other_roles_raise_value_error(role):
    with pytest.raises(ValueError, match="role"):
        Message(role, "x")  # type: ignore[arg-type]


def test_content_and_attachments_are_type_checked():
    with pytest.raises(TypeError, match="content"):
        Message("user", 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ImageBlock"):
        Message("user", "x", images=["https://example.org/a.png"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="list"):
        Message("user", "x", documents="one doc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="thinking"):
        Message("assistant", "x", thinking=3)  # type: ignore[arg-type]


def test_parts_are_content_then_documents_images_audio():
    image = ImageUrlBlock("https://example.org/cat.png")
    doc = Document("Paris is the capital.", title="Geo", doc_id="d1")
    m = Message("user", "Where?", documents=[doc, "loose text"], images=[image])
    parts = m.parts()
    assert str(parts[0]) == "Where?"
    assert parts[1] is doc
    assert isinstance(parts[2], Document) and parts[2].text == "loose text"
    assert parts[2].doc_id is None  # no invented ids
    assert parts[3] is image
    assert m.images == [image] and m.audio is None and len(m.documents) == 2


def test_format_for_llm_declares_role_thinking_and_tool_metadata():
    call = ModelToolCall("add", add, {"a": 1, "b": 2}, "call_1")
    m = Message("assistant", "", tool_calls=[call], thinking="add them")
    tr = m.format_for_llm()
    assert tr.obj is m and tr.role == "assistant" and tr.thinking == "add them"
    assert tr.args["content"] is m.parts()[0] and str(tr.args["content"]) == ""
    assert tr.template_order == ["*", "Message"]
    assert tr.tool_calls == [call.as_chat_dict()]
    tool_turn = Message("tool", "3", tool_call_id="call_1").format_for_llm()
    assert tool_turn.tool_call_id == "call_1" and tool_turn.role == "tool"


def test_parse_builds_an_assistant_message_with_thinking_and_tool_calls():
    call = ModelToolCall("add", add, {"a": 1, "b": 2}, "call_1")
    mot = ModelOutputThunk("the sum", thinking="easy", tool_calls=[call])
    parsed = Message("user", "add 1 and 2")._parse(mot)
    assert fields(parsed) == ("assistant", "the sum", "easy", [call.as_chat_dict()], None)
    assert Message("user", "q")._parse(ModelOutputThunk("plain")).tool_calls is None


def test_tool_message_links_to_its_call():
    call = ModelToolCall("add", add, {"a": 1, "b": 2}, "call_9")
    tm = ToolMessage("tool", "3", 3, "add", {"a": 1, "b": 2}, call)
    assert tm.tool_call_id == "call_9" and tm.name == "add"
    assert tm.arguments == {"a": 1, "b": 2} and tm.tool_output == 3 and tm.tool is call
    tr = tm.format_for_llm()
    assert tr.tool_call_id == "call_9" and tr.args["name"] == "add"
    with pytest.raises(TypeError, match="ModelToolCall"):
        ToolMessage("tool", "3", 3, "add", {}, {"id": "x"})  # type: ignore[arg-type]


# ----- message_from_template_representation -----------------------------------------------


def test_declared_role_wins_over_positional_guess():
    tr = TemplateRepresentation(obj=None, role="system")
    assert message_from_template_representation(tr, default_role="user", content="c").role == (
        "system"
    )
    tr.role = None
    assert message_from_template_representation(tr, default_role="user", content="c").role == (
        "user"
    )


def test_tool_call_id_is_carried_only_for_tool_role():
    tr = TemplateRepresentation(obj=None, role="tool", tool_call_id="c1", thinking="t")
    m = message_from_template_representation(tr, default_role="user", content="42")
    assert (m.tool_call_id, m.thinking, m.content) == ("c1", "t", "42")
    tr.role = "assistant"
    assert (
        message_from_template_representation(tr, default_role="user", content="").tool_call_id
        is None
    )


def test_invalid_declared_role_is_rejected_by_message():
    tr = TemplateRepresentation(obj=None, role="narrator")
    with pytest.raises(ValueError, match="role"):
        message_from_template_representation(tr, default_role="user", content="x")


# ----- as_chat_history ----------------------------------------------------------------------


def test_as_chat_history_accepts_messages_and_parsed_outputs():
    q = Message("user", "q")
    reply = Message("assistant", "a", thinking="t")
    mot = ModelOutputThunk("a", parsed_repr=reply)
    assert as_chat_history(chat(q, mot)) == [q, reply]


@pytest.mark.parametrize(
    "entry", [CBlock("x"), ModelOutputThunk("raw"), ModelOutputThunk("x", parsed_repr="x")]
)
def test_as_chat_history_rejects_other_entries_with_assertion_error(entry):
    with pytest.raises(AssertionError, match="entry 1"):
        as_chat_history(chat(Message("user", "q"), entry))


def test_non_linear_history_raises_value_error_in_both_conversions():
    class Branching(ChatContext):
        def is_linear(self) -> bool:
            return False

    ctx = Branching().add(Message("user", "q"))
    with pytest.raises(ValueError, match="non-linear"):
        as_chat_history(ctx)
    with pytest.raises(ValueError, match="non-linear"):
        as_generic_chat_history(ctx)


# ----- as_generic_chat_history -----------------------------------------------------------------


def test_generic_history_rules_for_each_entry_kind():
    seen: list[object] = []

    def fmt(obj: object) -> str:
        seen.append(obj)
        return f"<{type(obj).__name__}>"

    msg = Message("system", "rules")
    parsed_msg = Message("assistant", "from parse")
    call = ModelToolCall("add", add, {"a": 1, "b": 1}, "c1")
    entries = [
        msg,
        ModelOutputThunk("v", parsed_repr=parsed_msg),
        ModelOutputThunk("v", parsed_repr="str parse", thinking="th", tool_calls=[call]),
        ModelOutputThunk("only value", thinking="th2"),
        ModelOutputThunk("v", parsed_repr={"k": 1}),
        CBlock("plain"),
        Tagged("tagged"),
        Shout(role="tool"),
        Shout(),
        Opaque(),
    ]
    history = as_generic_chat_history(chat(*entries), formatter=fmt)
    assert history[0] is msg and history[1] is parsed_msg
    assert fields(history[2]) == ("assistant", "str parse", "th", [call.as_chat_dict()], None)
    assert fields(history[3]) == ("assistant", "only value", "th2", None, None)
    assert fields(history[4]) == ("assistant", "<dict>", None, None, None)
    assert fields(history[5]) == ("user", "plain", None, None, None)
    assert fields(history[6]) == ("user", "<Tagged>", None, None, None)
    assert fields(history[7]) == ("tool", "<Shout>", "why", None, "c7")
    assert fields(history[8]) == ("user", "<Shout>", "why", None, None)
    assert fields(history[9]) == ("user", "<Opaque>", None, None, None)
    # The formatter saw exactly the non-message entries that need text, never a Message.
    assert [type(o).__name__ for o in seen] == ["dict", "Tagged", "Shout", "Shout", "Opaque"]


def test_generic_history_default_formatter_warns_and_stringifies(caplog):
    with caplog.at_level(logging.WARNING, logger="mellea_local.messages"):
        history = as_generic_chat_history(chat(Shout()))
    assert history[0].content == "SHOUT"
    assert "Shout" in caplog.text


def test_generic_history_needs_evaluated_outputs():
    with pytest.raises(ValueError, match="evaluated"):
        as_generic_chat_history(chat(ModelOutputThunk(None)), formatter=str)


def test_generic_history_wraps_arbitrary_objects_as_user_text():
    class Weird:
        def __str__(self) -> str:
            return "weird"

    ctx = chat(Message("user", "q"))
    ctx._data = Weird()  # contexts only accept spans; simulate a foreign node
    assert fields(as_generic_chat_history(ctx, formatter=str)[0]) == (
        "user",
        "weird",
        None,
        None,
        None,
    )


# ----- properties of both conversions ------------------------------------------------------

roles = st.sampled_from(["system", "user", "assistant", "tool"])
texts = st.text(max_size=20)
thinking = st.none() | st.text(min_size=1, max_size=10)


@st.composite
def chat_entries(draw):
    """A Message, or a model output parsed into a Message (as a backend leaves it)."""
    role, content, thought = draw(roles), draw(texts), draw(thinking)
    if draw(st.booleans()):
        return Message(role, content, thinking=thought)
    mot = ModelOutputThunk(content, thinking=thought)
    mot.parsed_repr = Message("user", "prompt")._parse(mot)
    return mot


def expected(entry) -> tuple:
    return fields(entry.parsed_repr if isinstance(entry, ModelOutputThunk) else entry)


@given(st.lists(chat_entries(), max_size=8))
def test_both_conversions_agree_on_chat_histories_and_keep_thinking(entries):
    ctx = chat(*entries)
    strict = as_chat_history(ctx)
    generic = as_generic_chat_history(ctx, formatter=repr)
    assert [fields(m) for m in strict] == [expected(e) for e in entries]
    assert [fields(m) for m in generic] == [fields(m) for m in strict]


@given(st.lists(st.tuples(texts, st.none() | st.text(max_size=5), thinking), max_size=8))
def test_generic_history_turns_raw_outputs_into_assistant_turns(raw):
    # parsed_repr is either unset (None: the value is used) or a str parse.
    outputs = [ModelOutputThunk(v, parsed_repr=p, thinking=t) for v, p, t in raw]
    history = as_generic_chat_history(chat(*outputs), formatter=repr)
    assert [fields(m) for m in history] == [
        ("assistant", p if p is not None else v, t, None, None) for v, p, t in raw
    ]


def test_reprs_are_double_quoted_and_name_attachments_and_the_tool():
    assert repr(Message("user", 'say "hi"')) == 'Message(role="user", content="say \\"hi\\"")'
    call = ModelToolCall("fn", None, {}, tool_call_id="c1")
    tm = ToolMessage("tool", "out", "out", "fn", {}, call)
    assert repr(tm) == 'ToolMessage(role="tool", content="out", tool_call_id="c1", name="fn")'
    with pytest.raises(ValueError, match="Invalid role 'admin'"):
        Message("admin", "x")  # type: ignore[arg-type]
    assert Message("user", "x").format_for_llm().args["content"].value == "x"
