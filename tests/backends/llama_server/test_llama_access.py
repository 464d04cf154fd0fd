"""Server state is not open to other local processes: launched servers need the launch's
random key, and base requests state their adapters (all at 0) instead of trusting the
server-wide scales (issue 34)."""

from __future__ import annotations

import httpx
from conftest import needs_server

from mellea_local.core.context import ChatContext
from mellea_local.messages import Message
from mellea_local.options import ModelOption

pytestmark = needs_server

OPTS = {ModelOption.MAX_NEW_TOKENS: 24}


def test_without_the_key_no_one_changes_an_adapter_scale(llama):
    url = llama.urls[0]
    with httpx.Client(timeout=30) as http:
        refused = http.post(url + "/lora-adapters", json=[{"id": 1, "scale": 1.0}])
        assert refused.status_code == 401
        assert http.get(url + "/health").status_code == 200  # health stays public
        key = {"Authorization": f"Bearer {llama.processes[0].api_key}"}
        scales = [e["scale"] for e in http.get(url + "/lora-adapters", headers=key).json()]
    assert scales == [0.0, 0.0]


async def test_base_generation_ignores_a_changed_server_wide_scale(llama, hf):
    """Even a key holder setting the aLoRA's global scale to 1 does not reach a base request:
    each states its adapters at 0 (the first request of a conversation in particular)."""
    url = llama.urls[0]
    key = {"Authorization": f"Bearer {llama.processes[0].api_key}"}
    turn = Message("user", "What is the capital of France?")
    with httpx.Client(timeout=30, headers=key) as http:
        assert http.post(url + "/lora-adapters", json=[
            {"id": 0, "scale": 1.0}, {"id": 1, "scale": 1.0}]).status_code == 200
        try:
            outs = []
            for backend in (llama, hf):
                mot, _ = await backend.generate_from_context(turn, ChatContext(),
                                                             model_options=OPTS)
                outs.append(await mot.avalue())
        finally:
            http.post(url + "/lora-adapters", json=[{"id": 0, "scale": 0.0},
                                                    {"id": 1, "scale": 0.0}])
    assert outs[0] == outs[1]
