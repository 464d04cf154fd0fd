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
