"""The Backend interface's defaults."""

from __future__ import annotations

import pytest

from mellea_local.core.backend import Backend
from mellea_local.core.context import ChatContext
from mellea_local.core.thunk import ModelOutputThunk


class OnlyGenerates(Backend):
    async def generate_from_context(self, action, ctx, **kwargs):
        mot = ModelOutputThunk("ok")
        return mot, ctx.add(action).add(mot)


def test_backend_is_abstract():
    with pytest.raises(TypeError):
        Backend()  # type: ignore[abstract]


async def test_defaults_claim_no_intrinsics_and_refuse_scoring():
    backend = OnlyGenerates()
    assert backend.default_to_constraint_checking_alora is True
    assert backend.supports_intrinsic("requirement-check") is False
    with pytest.raises(NotImplementedError, match=r"OnlyGenerates.*requirement-check"):
        await backend.score_requirements(ChatContext(), ["be short"])


class PeerStyle(Backend):
    """A backend written for the peer library: it implements only the private hook."""

    async def _generate_from_context(self, action, ctx, *, format=None, model_options=None,
                                     tool_calls=False):
        mot = ModelOutputThunk(f"{action} {model_options} {tool_calls}")
        return mot, ctx.add(action).add(mot)


class Neither(Backend):
    pass


async def test_peer_style_hook_is_called_by_the_public_method():
    mot, ctx = await PeerStyle().generate_from_context(
        ModelOutputThunk("q"), ChatContext(), model_options={"k": 1}, tool_calls=True
    )
    assert mot.value == "q {'k': 1} True"
    assert ctx.as_list()[-1] is mot


def test_a_backend_implementing_neither_method_cannot_be_built():
    with pytest.raises(TypeError, match="abstract"):
        Neither()  # type: ignore[abstract]
