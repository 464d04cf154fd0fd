"""Scores travel as numbers: validating on an adapter runner never goes through JSON text.

``Backend.score_requirements`` returns JSON text because that is the peer's public contract;
inside the package the checking engine takes the numbers from the intrinsic call. Both text
paths are made to fail here, so the test proves they are not on the way.
"""

from __future__ import annotations

import pytest

import mellea_local.requirements.checking as checking
from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.intrinsics.requirement_check import arequirement_checks
from mellea_local.messages import Message
from mellea_local.requirements import ALoraRequirement, Requirement, avalidate

CTX = ChatContext().add(Message("user", "Name a city.")).add(Message("assistant", "Paris."))
REQS = ["The answer names a city.", "The answer is in French."]


async def test_validate_and_the_method_form_read_numbers_not_text(
    shared_embedded_backend, monkeypatch
):
    expected = await arequirement_checks(CTX, shared_embedded_backend, REQS)

    def no_text(*args, **kwargs):
        raise AssertionError("a score was read back from JSON text")

    monkeypatch.setattr(LocalHFBackend, "score_requirements", no_text)
    monkeypatch.setattr(checking, "requirement_check_score", no_text)
    results = await avalidate([ALoraRequirement(r) for r in REQS], CTX, shared_embedded_backend)
    assert [r.score for r in results] == expected  # the very floats, no rounding through text
    assert all(isinstance(r.score, float) for r in results)
    monkeypatch.undo()
    [single] = await arequirement_checks(CTX, shared_embedded_backend, REQS[:1])
    monkeypatch.setattr(LocalHFBackend, "score_requirements", no_text)
    monkeypatch.setattr(checking, "requirement_check_score", no_text)
    one = await Requirement(REQS[0]).validate(shared_embedded_backend, CTX)
    assert one.score == single


async def test_the_public_edge_still_returns_the_peer_text(shared_embedded_backend):
    [text] = await shared_embedded_backend.score_requirements(CTX, REQS[:1])
    assert isinstance(text, str) and text.startswith('{"requirement_check": {"score": ')
    assert checking.requirement_check_score(text) == pytest.approx(
        (await arequirement_checks(CTX, shared_embedded_backend, REQS[:1]))[0], abs=0)
