"""Wrong-typed messages and contexts end in typed MelleaLocalErrors naming the input (D10).

Before, these were builtin TypeErrors/ValueErrors (messages, contexts) or an AttributeError
from deep inside rendering (a context that is not a Context).
"""

from __future__ import annotations

import pytest

from mellea_local.core.context import ChatContext
from mellea_local.errors import InputTypeError, InvalidInputError
from mellea_local.messages import Message

BAD_MESSAGES = [
    ((123, "x"), InvalidInputError, "role"),
    (("bogus", "x"), InvalidInputError, "role"),
    (("user", None), InputTypeError, "content"),
    (("user", 123), InputTypeError, "content"),
    (("user", b"x"), InputTypeError, "content"),
]


@pytest.mark.parametrize(("args", "cls", "word"), BAD_MESSAGES, ids=repr)
def test_bad_messages_are_typed(args, cls, word):
    with pytest.raises(cls, match=word):
        Message(*args)


@pytest.mark.parametrize("item", ["bare text", None])
def test_bad_context_entries_are_typed(item):
    with pytest.raises((InputTypeError, InvalidInputError)):
        ChatContext().add(item)


@pytest.mark.parametrize("ctx", ["ctx", 123, [Message("user", "x")], {}])
async def test_generate_refuses_a_context_that_is_not_one(shared_embedded_backend, ctx):
    with pytest.raises(InputTypeError, match=r"^ctx must be a Context"):
        await shared_embedded_backend.generate_from_context(Message("user", "hi"), ctx)
