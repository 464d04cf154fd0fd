"""The adapter-runner seam: LocalHFBackend implements it, and the kind strategies behave."""

from __future__ import annotations

import pytest

from mellea_local.adapters import (
    STRATEGIES,
    AdapterKind,
    AdapterRunner,
    AloraStrategy,
    LoraStrategy,
    find_run,
    strategy_for,
)
from mellea_local.errors import AloraActivationError


def test_local_hf_backend_is_an_adapter_runner(check_backend):
    assert isinstance(check_backend, AdapterRunner)


def test_a_plain_object_is_not_a_runner():
    assert not isinstance(object(), AdapterRunner)


def test_one_strategy_per_kind_and_alora_preferred():
    assert set(STRATEGIES) == set(AdapterKind)
    assert isinstance(strategy_for(AdapterKind.ALORA), AloraStrategy)
    assert isinstance(strategy_for(AdapterKind.LORA), LoraStrategy)
    assert strategy_for(AdapterKind.ALORA).preference < strategy_for(AdapterKind.LORA).preference
    assert strategy_for(AdapterKind.ALORA).reuses_base_cache
    assert not strategy_for(AdapterKind.LORA).reuses_base_cache


def test_find_run_returns_the_last_occurrence():
    assert find_run([1, 2, 3, 1, 2], [1, 2]) == 3
    assert find_run([1, 2, 3], [4]) == -1
    assert find_run([1, 2, 3], []) == -1


def test_alora_strategy_refuses_tokens_without_its_invocation(check_backend):
    alora = check_backend.adapter_for("requirement-check")
    inv = list(alora.invocation_tokens)
    alora.strategy.require_activation(alora, [5, *inv, 7])
    with pytest.raises(AloraActivationError, match="would not activate"):
        alora.strategy.require_activation(alora, [5, 6, 7])
    assert alora.strategy.batchable(alora, [[*inv, 1], [*inv, 2]])
    assert not alora.strategy.batchable(alora, [[*inv, 1, *inv], [*inv, 2]])


def test_lora_strategy_acts_everywhere(check_backend):
    lora = check_backend.adapters["requirement-check_lora"]
    assert lora.strategy.activation_start(lora, [5, 6]) == 0
    assert lora.strategy.peft_forward_kwargs(3) == {}
