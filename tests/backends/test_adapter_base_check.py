"""An adapter trained on another base model is refused, naming both models and the way out."""

from __future__ import annotations

import pytest
from adapter_folders import copy_adapter

from mellea_local.errors import AdapterError


def _based_on(base):
    def edit(config):
        config["base_model_name_or_path"] = base
    return edit


def test_another_base_is_refused_naming_both_and_the_fix(bare_backend, tmp_path):
    folder = copy_adapter(tmp_path / "other", config=_based_on("ibm-granite/granite-4.1-3b"))
    with pytest.raises(AdapterError) as err:
        bare_backend.add_adapter(folder)
    message = str(err.value)
    assert "ibm-granite/granite-4.1-3b" in message and "mellea-tiny-chat" in message
    assert str(folder) in message and "allow_other_base=True" in message
    assert bare_backend.adapters == {} and bare_backend.engine.holder.peft is None


def test_the_opt_out_loads_it(bare_backend, tmp_path):
    folder = copy_adapter(tmp_path / "other", config=_based_on("someone/my-finetune"))
    adapter = bare_backend.add_adapter(folder, name="ft", allow_other_base=True)
    assert bare_backend.adapters == {"ft": adapter}


@pytest.mark.parametrize("base", [
    "mellea-tiny-chat",                      # what the shipped adapters say
    "ibm/mellea-tiny-chat",                  # a hub id of the same model
    "/somewhere/else/mellea-tiny-chat/",     # a local copy
    "MELLEA-Tiny-Chat",                      # case
    "/cache/models--org--mellea-tiny-chat/snapshots/" + "a" * 40,  # an HF cache snapshot
    None, "",                                # no claim: not checked
])
def test_the_same_base_under_another_spelling_loads(bare_backend, tmp_path, base):
    folder = copy_adapter(tmp_path / "same", config=_based_on(base))
    assert bare_backend.add_adapter(folder, name="same").name == "same"


def test_a_model_loaded_without_a_name_checks_nothing(tiny_tokenizer, tmp_path):
    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.embedded import build_model
    from mellea_local.embedded.random_adapter import save_random_adapter

    base = build_model(tiny_tokenizer, seed=5)
    folder = save_random_adapter(base, tiny_tokenizer, tmp_path / "a", alora=False, seed=1)
    backend = LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=5), tiny_tokenizer)
    assert backend.add_adapter(folder, name="x").name == "x"
