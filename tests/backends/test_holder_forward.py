"""``ModelHolder.forward``: a check's one forward without PEFT's per-call module walk.

The holder calls the model itself with the adapter's layers on and an aLoRA's offsets handed
to its own layers; that must compute what ``PeftModel.forward`` computes, bit for bit, on the
shipped model and its two trained adapters (aLoRA and LoRA), and leave no adapter and no hook
behind, also when the forward fails.
"""

from __future__ import annotations

import pytest
import torch

from mellea_local.backends.cache_compat import cache_kwarg_name, new_cache


def _row(adapter) -> tuple[list[int], int]:
    """Ids holding the aLoRA's invocation twice (PEFT starts at the last one), and the
    offset PEFT computes for them: the tokens from that last start to the end."""
    invocation = list(adapter.invocation_tokens or (31,))
    row = [1, 5, 9, *invocation, 40, 41, 42, *invocation, 33, 40, 41]
    start = adapter.strategy.require_activation(adapter, row)
    return row, len(row) - start


def _peft(holder, name: str, **kwargs) -> torch.Tensor:
    with holder.using(name) as peft, torch.no_grad():
        return peft(**kwargs).logits.clone()


def _no_hooks(holder) -> bool:
    return all(not m._forward_pre_hooks for m in holder.model.modules())


@pytest.mark.parametrize("which", ["requirement-check_alora", "requirement-check_lora"])
def test_forward_equals_peft_bit_for_bit(shared_embedded_backend, which):
    backend = shared_embedded_backend
    holder = backend.engine.holder
    adapter = backend.adapters[which]
    row, offset = _row(adapter)
    ids = torch.tensor([row])
    with torch.no_grad():
        base = holder.model(input_ids=ids).logits
        ours = holder.forward(adapter.name, input_ids=ids,
                              **adapter.strategy.peft_forward_kwargs(offset)).logits
    assert torch.equal(ours, _peft(holder, adapter.name, input_ids=ids))
    assert not torch.equal(ours, base)  # the adapter really acted
    holder.assert_base()
    assert _no_hooks(holder)


def test_forward_on_a_cache_equals_peft(shared_embedded_backend):
    """The check's shape: the conversation's base K/V cached, the suffix fed through the
    aLoRA with one logit kept."""
    backend = shared_embedded_backend
    holder, model = backend.engine.holder, backend.engine.model
    adapter = backend.adapters["requirement-check_alora"]
    row, offset = _row(adapter)
    shared = len(row) - offset
    kw = cache_kwarg_name(model)
    out = []
    for call in ("ours", "peft"):
        cache = new_cache(model)
        with torch.no_grad():
            model(input_ids=torch.tensor([row[:shared]]), use_cache=True, **{kw: cache})
            kwargs = {"input_ids": torch.tensor([row[shared:]]), "use_cache": True,
                      "logits_to_keep": 1, kw: cache}
            if call == "ours":
                out.append(holder.forward(adapter.name, alora_offsets=[offset],
                                          **kwargs).logits)
            else:
                out.append(_peft(holder, adapter.name, **kwargs))
    assert torch.equal(out[0], out[1])


def test_an_alora_without_offsets_goes_through_peft(shared_embedded_backend):
    backend = shared_embedded_backend
    holder = backend.engine.holder
    adapter = backend.adapters["requirement-check_alora"]
    row, offset = _row(adapter)
    ids = torch.tensor([row])
    with torch.no_grad():
        found = holder.forward(adapter.name, input_ids=ids).logits
        given = holder.forward(adapter.name, input_ids=ids, alora_offsets=[offset]).logits
    assert torch.equal(found, given)


def test_from_the_invocation_on_equals_peft(shared_embedded_backend, monkeypatch):
    """Every token fed is adapted (the aLoRA's layers run as plain LoRA layers)."""
    backend = shared_embedded_backend
    holder = backend.engine.holder
    adapter = backend.adapters["requirement-check_alora"]
    row, offset = _row(adapter)
    ids = torch.tensor([row[-offset:]])
    plain = []
    as_plain = holder._as_plain_lora
    monkeypatch.setattr(holder, "_as_plain_lora", lambda *a: plain.append(1) or as_plain(*a))
    with torch.no_grad():
        ours = holder.forward(adapter.name, input_ids=ids, alora_offsets=[offset]).logits
        longer = holder.forward(adapter.name, input_ids=ids, alora_offsets=[offset + 5]).logits
    assert plain == [1, 1]
    assert torch.equal(ours, _peft(holder, adapter.name, input_ids=ids))
    assert torch.equal(longer, ours)  # PEFT clips an offset to the tokens fed


@pytest.mark.parametrize("whole", [False, True], ids=["hooked", "as-plain-lora"])
def test_a_failed_forward_leaves_no_adapter_and_no_hook(shared_embedded_backend, whole):
    backend = shared_embedded_backend
    holder = backend.engine.holder
    adapter = backend.adapters["requirement-check_alora"]
    row, offset = _row(adapter)
    fed = row[-offset:] if whole else row
    variants = {id(m): dict(m.lora_variant) for m in holder.model.modules()
                if hasattr(m, "lora_variant")}
    with pytest.raises((TypeError, RuntimeError, IndexError)):
        holder.forward(adapter.name, input_ids=torch.tensor([fed], dtype=torch.float32),
                       alora_offsets=[offset])
    holder.assert_base()
    assert holder.active_adapter is None
    assert _no_hooks(holder)
    assert variants == {id(m): dict(m.lora_variant) for m in holder.model.modules()
                        if hasattr(m, "lora_variant")}
