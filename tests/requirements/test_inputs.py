"""Bad requirement arguments fail at the entry point, on the real embedded backend.

Before these checks ``requirement_checks(ctx, backend, "abc")`` scored each character (three
scores, no error), ``''`` and ``'   '`` were judged like any text, ``[1]`` scored the text
``1``, and ``None`` / ``123`` raised a raw ``TypeError`` naming no argument.
"""

from __future__ import annotations

import pytest

from mellea_local.core.context import ChatContext
from mellea_local.errors import InputTypeError, InvalidInputError, MelleaLocalError
from mellea_local.intrinsics.requirement_check import (
    arequirement_check,
    arequirement_checks,
    check_outputs,
    requirement_checks,
)
from mellea_local.messages import Message
from mellea_local.requirements import Requirement, avalidate, validate

CTX = ChatContext().add(Message("user", "Name a city.")).add(Message("assistant", "Paris."))

# (value, error class, words the message must hold); the argument's name is added per entry.
BAD_LISTS = [
    (None, InputTypeError, ["NoneType"]),
    (123, InputTypeError, ["int"]),
    (b"abc", InputTypeError, ["bytes"]),
    ({"a": 1}, InputTypeError, ["dict"]),
    ([1], InputTypeError, ["[0]", "int"]),
    (["fine", None], InputTypeError, ["[1]", "NoneType"]),
    ([""], InvalidInputError, ["[0]", "blank"]),
    (["  \t\n"], InvalidInputError, ["[0]", "blank"]),
    (["fine", Requirement()], InvalidInputError, ["[1]", "Requirement(None)"]),
    ([Requirement("   ")], InvalidInputError, ["[0]"]),
]
PLAIN_STRINGS = ["abc", "", "   ", "The response mentions paris."]


def _assert_names(exc: BaseException, argument: str, words: list[str]) -> None:
    assert isinstance(exc, MelleaLocalError)
    assert str(exc).startswith(argument), str(exc)
    for word in words:
        assert word in str(exc), (word, str(exc))


@pytest.mark.parametrize(("value", "cls", "words"), BAD_LISTS, ids=repr)
def test_requirement_checks_refuse_bad_lists_before_any_forward(shared_embedded_backend, value, cls,
                                                                words):
    before = shared_embedded_backend.stats.total
    with pytest.raises(cls) as info:
        requirement_checks(CTX, shared_embedded_backend, value)
    _assert_names(info.value, "requirements", words)
    assert shared_embedded_backend.stats.total == before


@pytest.mark.parametrize(("value", "cls", "words"), BAD_LISTS, ids=repr)
async def test_score_requirements_and_check_outputs_refuse_bad_lists(shared_embedded_backend, value,
                                                                      cls, words):
    before = shared_embedded_backend.stats.total
    with pytest.raises(cls) as info:
        await shared_embedded_backend.score_requirements(CTX, value)
    _assert_names(info.value, "descriptions", words)
    adapter = shared_embedded_backend.adapter_for("requirement-check")
    with pytest.raises(cls):
        await check_outputs(shared_embedded_backend, CTX, value, adapter=adapter)
    assert shared_embedded_backend.stats.total == before


@pytest.mark.parametrize("text", PLAIN_STRINGS)
async def test_a_plain_string_is_not_a_list_of_checks(shared_embedded_backend, text):
    with pytest.raises(InputTypeError, match=r"got a single str .*wrap it in a list"):
        await arequirement_checks(CTX, shared_embedded_backend, text)
    with pytest.raises(InputTypeError, match=r"^descriptions must be a list"):
        await shared_embedded_backend.score_requirements(CTX, text)


@pytest.mark.parametrize(("value", "cls", "words"), BAD_LISTS[:4] + BAD_LISTS[5:], ids=repr)
def test_validate_refuses_bad_requirements(shared_embedded_backend, value, cls, words):
    with pytest.raises(cls) as info:
        validate(value, CTX, shared_embedded_backend)
    _assert_names(info.value, "reqs", words)


@pytest.mark.parametrize("text", ["", "   ", "\n"])
async def test_validate_refuses_a_blank_single_requirement(shared_embedded_backend, text):
    with pytest.raises(InvalidInputError, match=r"^reqs\[0\] is .*blank"):
        await avalidate(text, CTX, shared_embedded_backend)


async def test_one_check_refuses_a_list_and_wrong_contexts_and_backends(shared_embedded_backend):
    with pytest.raises(InputTypeError, match=r"^requirement must be .* got list"):
        await arequirement_check(CTX, shared_embedded_backend, ["a", "b"])
    with pytest.raises(InputTypeError, match=r"^context must be a Context"):
        await arequirement_checks([Message("user", "hi")], shared_embedded_backend, ["a"])
    with pytest.raises(InputTypeError, match=r"^backend must be a backend with adapter_for"):
        await arequirement_checks(CTX, "embedded", ["a"])
    with pytest.raises(InputTypeError, match=r"^context must be a Context"):
        await avalidate(["a"], None, shared_embedded_backend)
    with pytest.raises(InputTypeError, match=r"^backend must be a Backend"):
        await avalidate(["a"], CTX, object())
    with pytest.raises(InputTypeError, match=r"^adapter must be the name"):
        await arequirement_checks(CTX, shared_embedded_backend, ["a"], adapter=3)


async def test_valid_inputs_score_as_before(shared_embedded_backend):
    texts = ["The response mentions paris.", "The response is in all capital letters."]
    as_list = await arequirement_checks(CTX, shared_embedded_backend, texts)
    # Any iterable but a str or mapping is a list of checks, scored the same. Within 1e-6, not
    # bit for bit: the shared backend's cache may serve the prefix from a copy or batch the
    # rows with another conversation's, which reorders float sums (~1e-7 measured).
    same = pytest.approx(as_list, abs=1e-6)
    assert await arequirement_checks(CTX, shared_embedded_backend, tuple(texts)) == same
    assert await arequirement_checks(CTX, shared_embedded_backend, (t for t in texts)) == same
    assert await arequirement_checks(CTX, shared_embedded_backend,
                                     [Requirement(t) for t in texts]) == same
    assert as_list[0] > 0.5 > as_list[1]
    assert await arequirement_checks(CTX, shared_embedded_backend, []) == []
    # One str is one requirement for validate, as the peer's validate allows.
    [single] = await avalidate(texts[0], CTX, shared_embedded_backend)
    assert single.score == pytest.approx(as_list[0], abs=1e-6)
