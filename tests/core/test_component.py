"""The Component protocol, parse wrapping and TemplateRepresentation."""

from __future__ import annotations

import pytest

from mellea_local.core.blocks import CBlock
from mellea_local.core.component import Component, TemplateRepresentation, parse
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import ComponentParseError, MelleaLocalError
from mellea_local.messages import Message


class Number(Component[int]):
    def parts(self):
        return []

    def format_for_llm(self):
        return TemplateRepresentation(obj=self, args={"kind": "number"})

    def _parse(self, computed):
        return int(computed.value)


class Duck:
    """Not a subclass, but has the three methods: counts as a Component."""

    def parts(self):
        return []

    def format_for_llm(self):
        return "duck"

    def _parse(self, computed):
        return None


def test_isinstance_is_structural():
    assert isinstance(Number(), Component)
    assert isinstance(Duck(), Component)
    assert isinstance(Message("user", "x"), Component)
    assert not isinstance(CBlock("x"), Component)
    assert not isinstance(ModelOutputThunk("x"), Component)


def test_parse_wraps_any_failure():
    assert parse(Number(), ModelOutputThunk("41")) == 41
    with pytest.raises(ComponentParseError, match=r"Number\._parse") as info:
        parse(Number(), ModelOutputThunk("forty-one"))
    assert isinstance(info.value.__cause__, ValueError)
    assert isinstance(info.value, MelleaLocalError)


def test_protocol_defaults_raise_not_implemented():
    class Bare(Component[str]):
        pass

    bare = Bare()
    for call in (bare.parts, bare.format_for_llm, lambda: bare._parse(ModelOutputThunk("x"))):
        with pytest.raises(NotImplementedError, match="Bare"):
            call()


def test_template_representation_defaults():
    tr = TemplateRepresentation(obj="o")
    assert tr.args == {} and tr.role is None and tr.tools is None and tr.template is None
    assert tr.thinking is None and tr.tool_calls is None and tr.tool_call_id is None
    assert TemplateRepresentation(obj="p").args is not tr.args  # no shared mutable default
