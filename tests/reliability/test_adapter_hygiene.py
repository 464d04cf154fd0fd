"""Adding an adapter is all or nothing; removing one leaves the plain base model.

Every test breaks a real load of a real PEFT adapter onto the shipped model (a bad file, or an
exception raised inside PEFT half way through) and then holds the backend to: the same base
logits bit for bit, the same greedy answer, the same module objects, no adapter entry, the
name free for a good adapter, and a prefix cache that still gives what a cold run gives.
"""

from __future__ import annotations

import pytest
import torch
from adapter_folders import copy_adapter, module_tree, probe, shipped_adapter

from mellea_local import CBlock, ChatContext, ModelOption
from mellea_local.backends.hf import engine as hf_engine
from mellea_local.errors import AdapterError, AdapterNotFoundError

GREEDY = {ModelOption.MAX_NEW_TOKENS: 10, ModelOption.TEMPERATURE: 0}


async def answer(backend) -> str:
    mot, _ = await backend.generate_from_context(CBlock("What is 3 + 4?"), ChatContext(),
                                                 model_options=GREEDY)
    return await mot.avalue()


class _State:
    """Everything a failed load must leave as it was."""

    def __init__(self, backend) -> None:
        self.logits = probe(backend)
        self.tree = module_tree(backend.model)
        self.adapters = dict(backend.adapters)
        self.peft_names = list(backend.engine.holder.adapter_names)
        self.grads = [p.requires_grad for p in backend.model.parameters()]
        self.adapted = _adapter_logits(backend)

    def assert_same(self, backend) -> None:
        assert all(torch.equal(a, b) for a, b in zip(
            _adapter_logits(backend), self.adapted, strict=True))
        assert torch.equal(probe(backend), self.logits)
        assert module_tree(backend.model) == self.tree
        assert backend.adapters == self.adapters
        assert backend.engine.holder.adapter_names == self.peft_names
        assert [p.requires_grad for p in backend.model.parameters()] == self.grads
        backend.engine.holder.assert_base()


def _adapter_logits(backend) -> list[torch.Tensor]:
    """What each loaded adapter computes on a row holding the aLoRA invocation."""
    ids = torch.tensor([[1, 5, 9, 31, 622, 33, 40, 41]])
    out = []
    for name in sorted(backend.adapters):
        with backend.engine.holder.using(name) as peft, torch.no_grad():
            out.append(peft(ids).logits.clone())
    return out


def _truncate_a(state) -> None:
    key = sorted(k for k in state if ".lora_A." in k)[3]
    state[key] = state[key][:4]


@pytest.fixture(params=["bare", "embedded"])
def backend(request):
    """The first adapter onto a bare model, and one more beside two loaded adapters."""
    return request.getfixturevalue(f"{request.param}_backend")


# ----- refused before PEFT runs ---------------------------------------------------------------


async def test_a_tensor_of_the_wrong_rank_is_refused_up_front(backend, tmp_path):
    before = _State(backend)
    text = await answer(backend)
    bad = copy_adapter(tmp_path / "bad", tensors=_truncate_a)
    with pytest.raises(AdapterError, match=r"rank 4.*declares r=32") as err:
        backend.add_adapter(bad, name="rc")
    assert str(bad) in str(err.value)
    before.assert_same(backend)
    assert await answer(backend) == text
    backend.add_adapter(shipped_adapter("lora"), name="rc")  # the name is free again
    assert "rc" in backend.adapters


# ----- faults inside PEFT: the transaction rolls back ------------------------------------------


def _skip_checks(monkeypatch) -> None:
    """Let a broken file reach PEFT, as it did before the up-front checks existed."""
    from safetensors import safe_open

    def keys_only(resolved, model, config):
        with safe_open(str(resolved.weights_path), framework="pt") as f:
            return set(f.keys())

    monkeypatch.setattr(hf_engine, "check_weight_fit", keys_only)  # Engine.load_adapter


def _fail_state_dict(monkeypatch):
    import peft.peft_model

    def boom(*args, **kwargs):
        raise RuntimeError("injected: state dict")

    monkeypatch.setattr(peft.peft_model, "set_peft_model_state_dict", boom)


def _fail_third_layer(monkeypatch):
    from peft.tuners.lora import LoraLayer

    real = LoraLayer.update_layer
    calls = {"n": 0}

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected: third layer")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(LoraLayer, "update_layer", flaky)


def _fail_weights_read(monkeypatch):
    import peft.peft_model

    def boom(*args, **kwargs):
        raise OSError("injected: disk read")

    monkeypatch.setattr(peft.peft_model, "load_peft_weights", boom)


FAULTS = {
    "state-dict": _fail_state_dict,
    "half-injected": _fail_third_layer,
    "weights-read": _fail_weights_read,
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_a_fault_inside_peft_leaves_no_trace(backend, fault, monkeypatch):
    before = _State(backend)
    text = await answer(backend)  # also fills the prefix cache
    with monkeypatch.context() as patch:
        FAULTS[fault](patch)
        with pytest.raises(AdapterError, match="backend is unchanged") as err:
            backend.add_adapter(shipped_adapter("lora"), name="rc")
    assert "injected" in str(err.value)
    before.assert_same(backend)
    assert await answer(backend) == text  # reusing the cache
    assert backend.stats.last.reused_tokens > 0
    backend.prefix_cache.clear()
    assert await answer(backend) == text  # cold
    adapter = backend.add_adapter(shipped_adapter("lora"), name="rc")
    assert adapter.name == "rc"
    assert torch.equal(probe(backend), before.logits)


async def test_the_reported_wrong_rank_case_reaching_peft_rolls_back(backend, tmp_path,
                                                                      monkeypatch):
    """Issue 28 D1: a rank-4 lora_A made '3 + 4 = 7.' into '3 + 4 = 8.' on base calls."""
    before = _State(backend)
    text = await answer(backend)
    _skip_checks(monkeypatch)
    bad = copy_adapter(tmp_path / "bad", tensors=_truncate_a)
    with pytest.raises(AdapterError, match="size mismatch"):
        backend.add_adapter(bad, name="rc")
    before.assert_same(backend)
    assert await answer(backend) == text


async def test_an_interrupt_during_the_load_rolls_back_and_propagates(backend, monkeypatch):
    import peft.peft_model

    before = _State(backend)

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(peft.peft_model, "set_peft_model_state_dict", interrupt)
    with pytest.raises(KeyboardInterrupt):
        backend.add_adapter(shipped_adapter("alora"), name="rc")
    before.assert_same(backend)


async def test_matrices_missing_from_the_file_are_refused_after_injection(backend, tmp_path):
    """PEFT only warns when a targeted layer finds no weights; we refuse and roll back."""
    before = _State(backend)

    def drop_layer_5(state):
        for key in [k for k in state if ".layers.5." in k]:
            del state[key]

    bad = copy_adapter(tmp_path / "bad", tensors=drop_layer_5)
    with pytest.raises(AdapterError, match=r"lacks .* LoRA matrices"):
        backend.add_adapter(bad, name="rc")
    before.assert_same(backend)


# ----- add / unload cycles ---------------------------------------------------------------------


async def test_many_add_unload_cycles_leave_the_plain_base(bare_backend, tmp_path):
    backend = bare_backend
    before = _State(backend)
    text = await answer(backend)
    bad = copy_adapter(tmp_path / "bad", tensors=_truncate_a)
    adapted = None
    for i in range(12):
        alora = backend.add_adapter(shipped_adapter("alora"), name=f"a{i}")
        lora = backend.add_adapter(shipped_adapter("lora"), name=f"l{i}")
        with pytest.raises(AdapterError):
            backend.add_adapter(bad, name=f"bad{i}")
        with backend.engine.holder.using(lora.name) as peft, torch.no_grad():
            ids = torch.tensor([[1, 2, 3, 4, 5]])
            out = peft(ids).logits
        adapted = out if adapted is None else adapted
        assert torch.equal(out, adapted)  # the adapter computes the same every cycle
        assert torch.equal(probe(backend), before.logits)
        backend.unload_adapter(alora.name if i % 2 else lora.name)
        backend.unload_adapter(lora.name if i % 2 else alora.name)
    before.assert_same(backend)  # zero adapter layers: the very same module objects
    assert backend.engine.holder.peft is None
    assert await answer(backend) == text


def test_unloading_one_keeps_the_other_exact(embedded_backend):
    backend = embedded_backend
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with backend.engine.holder.using("requirement-check_lora") as peft, torch.no_grad():
        lora = peft(ids).logits
    backend.unload_adapter("requirement-check_alora")
    assert set(backend.adapters) == {"requirement-check_lora"}
    with backend.engine.holder.using("requirement-check_lora") as peft, torch.no_grad():
        assert torch.equal(peft(ids).logits, lora)
    with pytest.raises(AdapterNotFoundError, match="nothing to unload"):
        backend.unload_adapter("requirement-check_alora")


# ----- first hour -------------------------------------------------------------------------------


def test_adding_what_embedded_already_loaded_returns_it(embedded_backend):
    backend = embedded_backend
    loaded = backend.adapters["requirement-check_alora"]
    assert backend.add_adapter("requirement-check") is loaded
    assert backend.add_adapter(shipped_adapter("lora")) is backend.adapters[
        "requirement-check_lora"]
    assert len(backend.adapters) == 2


def test_a_real_clash_names_what_the_caller_passed(embedded_backend, tmp_path):
    other = copy_adapter(tmp_path / "requirement-check" / "mellea-tiny-chat" / "alora",
                         kind="alora")
    with pytest.raises(AdapterError) as err:
        embedded_backend.add_adapter("requirement-check", roots=[tmp_path])
    message = str(err.value)
    assert "add_adapter('requirement-check')" in message
    assert str(other) in message and "name=" in message and "unload_adapter" in message
