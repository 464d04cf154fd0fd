"""Pin predicates and the window compactor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mellea_local.core.blocks import CBlock
from mellea_local.core.compactor import (
    WindowCompactor,
    pin_nothing,
    pin_system,
    pin_system_and_initial_user,
)
from mellea_local.core.context import ChatContext, SimpleContext
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.messages import Message

S1, S2 = Message("system", "a"), Message("system", "b")
U1, U2 = Message("user", "q1"), Message("user", "q2")
A1 = Message("assistant", "r1")


def test_pin_predicates():
    history = [S1, S2, U1, A1, U2]
    assert pin_nothing(history) == 0
    assert pin_system(history) == 2
    assert pin_system_and_initial_user(history) == 3
    # Only the leading run counts; a later system message is not pinned.
    assert pin_system([U1, S1]) == 0
    assert pin_system_and_initial_user([U1, A1]) == 1
    assert pin_system_and_initial_user([S1, A1]) == 1
    assert pin_system([CBlock("system")]) == 0
    assert pin_system([]) == 0


def test_window_keeps_pinned_prefix_and_newest_entries():
    ctx = ChatContext().with_history([S1, U1, A1, U2])
    assert WindowCompactor(2).compact(ctx).as_list() == [S1, A1, U2]
    assert WindowCompactor(0).compact(ctx).as_list() == [S1]
    assert WindowCompactor(1, pin_system_and_initial_user).compact(ctx).as_list() == [S1, U1, U2]
    assert WindowCompactor(1, pin_predicate=pin_nothing).compact(ctx).as_list() == [U2]


def test_window_returns_the_same_context_when_it_fits():
    ctx = SimpleContext().with_history([S1, U1])
    assert WindowCompactor(1).compact(ctx) is ctx
    compacted = WindowCompactor(0).compact(ctx)
    assert type(compacted) is SimpleContext and compacted.as_list() == [S1]


@pytest.mark.parametrize("size", [-1, 1.5, True, "2"])
def test_window_size_must_be_a_non_negative_int(size):
    with pytest.raises(ValueError, match="size"):
        WindowCompactor(size)  # type: ignore[arg-type]


def test_pin_predicate_result_is_checked():
    ctx = ChatContext().with_history([U1, U2])
    with pytest.raises(ValueError, match="Pin predicate"):
        WindowCompactor(0, pin_predicate=lambda spans: 5).compact(ctx)
    assert "pin_system" in repr(WindowCompactor(3))


@given(st.integers(0, 6), st.integers(0, 4), st.integers(0, 10))
def test_window_invariants(size, n_system, n_body):
    history = [Message("system", f"s{i}") for i in range(n_system)]
    history += [Message("user", f"u{i}") for i in range(n_body)]
    out = WindowCompactor(size).compact(ChatContext().with_history(history)).as_list()
    assert out[:n_system] == history[:n_system]
    assert out[n_system:] == (history[n_system:][-size:] if size else [])
    assert len(out) == n_system + min(size, n_body)


def _used(tokens: int | None) -> ModelOutputThunk:
    return ModelOutputThunk("out", usage=None if tokens is None else {"total_tokens": tokens})


def test_threshold_compactor_runs_its_inner_only_past_the_threshold():
    from mellea_local.core.compactor import ThresholdCompactor, _last_usage_tokens

    gated = ThresholdCompactor(WindowCompactor(2, pin_predicate=pin_nothing), threshold=100)
    base = ChatContext().add(CBlock("a")).add(CBlock("b")).add(CBlock("c"))
    assert gated.compact(base) is base  # no usage reported: the gate stays shut
    small = base.add(_used(50))
    assert gated.compact(small) is small and _last_usage_tokens(small) == 50
    big = base.add(_used(500)).add(CBlock("d")).add(_used(None))
    assert _last_usage_tokens(big) == 500  # the newest output that reports usage
    assert len(gated.compact(big).as_list()) == 2
    split = ModelOutputThunk("x", usage={"prompt_tokens": 40, "completion_tokens": 20})
    assert _last_usage_tokens(base.add(split)) == 60
    assert ThresholdCompactor(WindowCompactor(1), threshold=0).compact(big) is big
    assert ChatContext(compactor=gated).compactor is gated
    with pytest.raises(TypeError, match="compact"):
        ThresholdCompactor(object(), threshold=1)  # type: ignore[arg-type]
