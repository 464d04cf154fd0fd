"""aLoRAs invoked by chat-template tokens (a role header) run the requirement check.

The first-generation granite requirement-check aLoRA is invoked by
``<|start_of_role|>check_requirement<|end_of_role|>``; others by the header of the check turn
followed by the instruction's first word. Both are located in the rendered token ids (the last
occurrence, as PEFT does) and must give what a from-scratch PEFT forward gives.
"""

from __future__ import annotations

import pytest
import torch

from mellea_local.adapters import REQUIREMENT_CHECK_IO_YAML, find_run
from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model
from mellea_local.intrinsics.requirement_check import arequirement_check, build_check_prompts
from mellea_local.messages import Message

from .conftest import BASE_NAME, BASE_SEED
from .test_generic_intrinsic import _generated, _save_alora

TOL = 1e-4
REQ = "The response mentions paris."
FIRST_GENERATION = "<|start_of_role|>check_requirement<|end_of_role|>"
HEADER = "<|start_of_role|>user<|end_of_role|><requirements>"


def _io_yaml(form: str) -> str:
    text = REQUIREMENT_CHECK_IO_YAML.read_text()
    if form == FIRST_GENERATION:
        # The first generation's prompt: the requirement, end of text, then the role header.
        return text.replace("<requirements>: {requirement}",
                            "Requirement: {requirement}<|end_of_text|>\n  " + FIRST_GENERATION)
    return text


@pytest.fixture(params=[FIRST_GENERATION, HEADER], ids=["check_requirement-role", "user-header"])
def setup(request, tiny_tokenizer, tmp_path):
    folder = tmp_path / "requirement-check" / BASE_NAME / "alora"
    _save_alora(tiny_tokenizer, folder, request.param, _io_yaml(request.param), seed=31)
    backend = LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=BASE_SEED),
                                         tiny_tokenizer, model_id=BASE_NAME)
    backend.add_adapter("requirement-check", roots=[tmp_path])
    return backend, folder, request.param


async def test_role_header_invocation_runs_and_equals_a_scratch_forward(setup, tiny_tokenizer):
    from peft import PeftModel

    backend, folder, invocation = setup
    ctx = await _generated(backend)
    adapter = backend.adapter_for("requirement-check")
    [prompt] = build_check_prompts(backend, ctx, [REQ], adapter)
    inv = tiny_tokenizer.encode(invocation, add_special_tokens=False)
    assert find_run(prompt.ids, inv) == prompt.shared  # located in token space, last occurrence
    score = await arequirement_check(ctx, backend, REQ)
    assert backend.stats.last.reused_tokens > 0  # the conversation came from the base cache
    backend.engine.holder.assert_base()

    forced = tiny_tokenizer.encode('{"score": "', add_special_tokens=False)
    model = PeftModel.from_pretrained(build_model(tiny_tokenizer, seed=BASE_SEED), str(folder))
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt.ids + forced])).logits[0, -1]
    probs = torch.softmax(logits.float(), -1)
    mass = {"yes": 0.0, "no": 0.0}
    for token_id in range(len(tiny_tokenizer)):
        piece = tiny_tokenizer.decode([token_id])
        hit = next((c for c in ("yes", "no") if piece and (c.startswith(piece)
                                                           or piece == c + '"')), None)
        if hit:
            mass[hit] += float(probs[token_id])
    assert abs(score - mass["yes"] / (mass["yes"] + mass["no"])) <= TOL


def test_invocation_missing_from_the_turn_is_refused(tiny_tokenizer, tmp_path):
    from mellea_local.errors import AloraActivationError

    folder = tmp_path / "requirement-check" / BASE_NAME / "alora"
    _save_alora(tiny_tokenizer, folder, "<|start_of_role|>judge<|end_of_role|>",
                REQUIREMENT_CHECK_IO_YAML.read_text(), seed=32)
    backend = LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=BASE_SEED),
                                         tiny_tokenizer, model_id=BASE_NAME)
    backend.add_adapter("requirement-check", roots=[tmp_path])
    ctx = ChatContext().add(Message("user", "Hi")).add(Message("assistant", "Hello"))
    with pytest.raises(AloraActivationError, match="judge"):
        build_check_prompts(backend, ctx, [REQ], backend.adapter_for("requirement-check"))
