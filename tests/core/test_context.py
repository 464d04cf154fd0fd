"""Contexts: immutability, history views, turns and compaction on add."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mellea_local.core.blocks import CBlock
from mellea_local.core.compactor import InlineCompactor, WindowCompactor, pin_nothing
from mellea_local.core.context import ChatContext, Context, ContextTurn, SimpleContext
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.messages import Message, as_generic_chat_history
from mellea_local.rendering.chat import to_chat_messages


def chat(*entries) -> ChatContext:
    ctx = ChatContext()
    for e in entries:
        ctx = ctx.add(e)
    return ctx


def test_add_returns_a_new_context_and_leaves_the_old_one_alone():
    root = ChatContext()
    a = CBlock("a")
    one = root.add(a)
    two = one.add(CBlock("b"))
    assert root.as_list() == [] and root.is_root_node
    assert one.as_list() == [a]
    assert [str(x) for x in two.as_list()] == ["a", "b"]
    assert two.previous_node is one and two.node_data is not a
    # Branches share history without seeing each other.
    other = one.add(CBlock("c"))
    assert [str(x) for x in other.as_list()] == ["a", "c"]
    assert [str(x) for x in two.as_list()] == ["a", "b"]


def test_same_object_added_twice_appears_twice():
    m = Message("user", "again")
    ctx = chat(m, m, m)
    assert ctx.as_list() == [m, m, m]
    assert ctx.as_list(2) == [m, m]


def test_as_list_last_n():
    items = [CBlock(str(i)) for i in range(5)]
    ctx = chat(*items)
    assert ctx.as_list(0) == []
    assert ctx.as_list(2) == items[-2:]
    assert ctx.as_list(50) == items
    with pytest.raises(ValueError, match="last_n"):
        ctx.as_list(-1)


@given(st.lists(st.sampled_from(["a", "b", "c"]), max_size=15), st.integers(0, 20))
def test_as_list_is_the_added_sequence(texts, n):
    blocks = [CBlock(t) for t in texts]
    ctx = chat(*blocks)
    assert ctx.as_list() == blocks
    assert ctx.as_list(n) == (blocks[-n:] if n else [])


def test_bare_text_and_none_cannot_be_added_but_other_objects_are_kept():
    with pytest.raises(TypeError, match="Message"):
        ChatContext().add("plain text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ChatContext().add(None)  # type: ignore[arg-type]

    class Custom:
        def __str__(self) -> str:
            return "custom"

    custom = Custom()
    ctx = ChatContext().add(Message("user", "hi")).add(custom)  # type: ignore[arg-type]
    assert ctx.as_list()[-1] is custom
    history = as_generic_chat_history(ctx, formatter=lambda o: f"<{type(o).__name__}>")
    assert [(m.role, m.content) for m in history] == [("user", "hi"), ("user", "<Custom>")]
    with pytest.raises(TypeError, match="Cannot render a Custom"):
        to_chat_messages(ctx.view_for_generation())


def test_simple_context_keeps_history_but_renders_none():
    ctx = SimpleContext().add(Message("user", "hi"))
    assert len(ctx.as_list()) == 1
    assert ctx.view_for_generation() == []
    assert ctx.actions_for_available_tools() == []
    assert type(ctx) is SimpleContext


def test_chat_context_renders_the_whole_history():
    items = [Message("system", "s"), Message("user", "u")]
    ctx = chat(*items)
    assert ctx.view_for_generation() == items
    assert ctx.actions_for_available_tools() == items


def test_last_output_looks_at_the_last_three_entries():
    out = ModelOutputThunk("answer")
    ctx = chat(Message("user", "q"), out, Message("user", "next"))
    assert ctx.last_output() is out
    assert ctx.add(CBlock("x")).add(CBlock("y")).last_output() is None
    assert ctx.add(CBlock("x")).add(CBlock("y")).last_output(check_last_n_components=5) is out


def test_last_turn():
    q = Message("user", "q")
    out = ModelOutputThunk("a")
    assert ChatContext().last_turn() is None
    assert chat(q).last_turn() == ContextTurn(model_input=q, output=None)
    assert chat(q, out).last_turn() == ContextTurn(model_input=q, output=out)
    reply = Message("assistant", "r")
    assert chat(reply).last_turn() == ContextTurn(model_input=None, output=reply)
    tool = Message("tool", "42", tool_call_id="c1")
    assert chat(out, tool).last_turn() == ContextTurn(model_input=tool, output=None)
    # Two answers in a row: the earlier one is not the input of the later one.
    assert chat(out, reply).last_turn() == ContextTurn(model_input=None, output=reply)


def test_chat_context_rejects_compactor_and_window_together():
    with pytest.raises(ValueError, match="not both"):
        ChatContext(compactor=WindowCompactor(2), window_size=2)
    with pytest.raises(TypeError, match="requires an InlineCompactor"):
        ChatContext(compactor=object())  # type: ignore[arg-type]


def test_window_size_compacts_on_add_and_keeps_leading_system_messages():
    system = Message("system", "rules")
    ctx = ChatContext(window_size=2).add(system)
    users = [Message("user", str(i)) for i in range(4)]
    for u in users:
        ctx = ctx.add(u)
    assert ctx.as_list() == [system, *users[-2:]]
    assert isinstance(ctx.compactor, WindowCompactor)
    # Compaction is persistent and the configuration travels on.
    more = ctx.add(Message("user", "4"))
    assert [m.content for m in more.as_list()] == ["rules", "3", "4"]


def test_compactor_must_return_a_chat_context():
    class ToSimple(InlineCompactor):
        def compact(self, ctx):
            return SimpleContext()

    with pytest.raises(TypeError, match="must return a ChatContext"):
        ChatContext(compactor=ToSimple()).add(CBlock("x"))


def test_with_history_keeps_type_and_config_without_compacting():
    ctx = ChatContext(compactor=WindowCompactor(1, pin_predicate=pin_nothing))
    items = [CBlock(str(i)) for i in range(3)]
    rebuilt = ctx.with_history(items)
    assert rebuilt.as_list() == items  # not cut to 1: no compaction on rebuild
    assert rebuilt.compactor is ctx.compactor
    assert rebuilt.add(CBlock("3")).as_list()[-1].value == "3"
    assert len(rebuilt.add(CBlock("3")).as_list()) == 1
    fresh = rebuilt.new_instance()
    assert fresh.as_list() == [] and fresh.compactor is ctx.compactor


def test_non_linear_context_has_no_list():
    class Branching(ChatContext):
        def is_linear(self) -> bool:
            return False

    ctx = Branching().add(CBlock("x"))
    assert ctx.as_list() is None
    assert ctx.last_output() is None
    assert "non-linear" in repr(ctx)


def test_context_is_abstract():
    with pytest.raises(TypeError):
        Context()  # type: ignore[abstract]


def test_duck_typed_compactors_are_refused_and_inline_ones_accepted():
    class Duck:
        def compact(self, ctx):
            return ctx

    with pytest.raises(TypeError, match="requires an InlineCompactor"):
        ChatContext(compactor=Duck())  # type: ignore[arg-type]

    class Identity(InlineCompactor):
        def compact(self, ctx):
            return ctx

    assert [str(e) for e in ChatContext(compactor=Identity()).add(CBlock("a")).as_list()] == ["a"]


def test_token_limit_keeps_the_newest_entries_that_fit_and_the_system_prompt():
    system = Message("system", "s" * 400)  # 100 tokens, pinned: never dropped
    ctx = ChatContext(token_context_length_limit=130).add(system)
    for i in range(7):
        ctx = ctx.add(CBlock("x" * 100 + str(i)))  # 25 tokens each; budget int(130*.75)=97
    view = ctx.view_for_generation()
    assert view[0] is system and [str(s)[-1] for s in view[1:]] == ["4", "5", "6"]
    assert len(ctx.as_list()) == 8  # the history itself is untouched
    assert ctx.add(CBlock("y"))._token_context_length_limit == 130
    assert ctx.new_instance()._token_context_length_limit == 130
    with pytest.raises(ValueError, match="token_context_length_limit"):
        ChatContext(token_context_length_limit=0)


def test_model_id_binding_is_on_a_root_only_and_a_plain_id_never_truncates():
    ctx = ChatContext(window_size=5)
    bound = ctx._bind_model("some/model")
    assert bound.model_id == "some/model" and ctx.model_id is None
    assert bound.compactor is ctx.compactor
    for _ in range(50):
        bound = bound.add(CBlock("x" * 400))
    assert bound.model_id == "some/model" and len(bound.view_for_generation()) == 5
    with pytest.raises(ValueError, match="root"):
        bound._bind_model("other")
    assert ChatContext(window_size=3).reset_to_new().compactor is None


def test_a_model_identifier_with_a_context_length_bounds_the_view(tmp_path):
    from mellea_local.model_ids import ModelIdentifier, get_context_length

    tiny = ModelIdentifier(hf_model_name="org/tiny", context_length=20)  # budget int(15)
    ctx = ChatContext(model_id=tiny)
    for _ in range(8):
        ctx = ctx.add(CBlock("abcdefgh"))  # 2 tokens each: 7 fit exactly
    assert len(ctx.view_for_generation()) == 7
    unknown = ChatContext(model_id=ModelIdentifier(hf_model_name="org/unknown"))
    assert len(unknown.add(CBlock("x" * 4000)).view_for_generation()) == 1
    assert get_context_length(tiny) == 20 and get_context_length("not-a-model") is None
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 2048}')
    assert get_context_length(str(tmp_path)) == 2048
