"""Adapter sources: folders, library layout and preference, the pinned hub, and every error."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from mellea_local.adapters import (
    CATALOG,
    GRANITELIB_CORE_REPO,
    GRANITELIB_CORE_REVISION,
    REQUIREMENT_CHECK_IO_YAML,
    AdapterKind,
    HubSource,
    IntrinsicCatalogEntry,
    base_model_name,
    catalog_entry,
    default_library_roots,
    fetch_from_hub,
    find_in_library,
    known_intrinsics,
    library_subpath,
    read_adapter_folder,
    resolve_adapter,
)
from mellea_local.errors import AdapterError, AdapterNotFoundError, IOConfigError

BASE = "ibm-granite/granite-4.1-3b"
INVOCATION = [27, 71226, 29]  # "<requirements>" on the granite-4.1 tokenizer


def write_adapter(folder: Path, *, invocation: list[int] | None = None,
                  base: str = BASE, weights: bool = True, io_yaml: bool = True,
                  config: dict | None = None) -> Path:
    """An adapter folder shaped as PEFT saves one (config keys, safetensors weights)."""
    folder.mkdir(parents=True, exist_ok=True)
    adapter_config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 2, "lora_alpha": 4,
                      "target_modules": ["q_proj", "v_proj"], "base_model_name_or_path": base,
                      "alora_invocation_tokens": invocation}
    adapter_config.update(config or {})
    (folder / "adapter_config.json").write_text(json.dumps(adapter_config))
    if weights:
        save_file({"base_model.model.lora_A.weight": np.zeros((2, 4), dtype=np.float32)},
                  str(folder / "adapter_model.safetensors"))
    if io_yaml:
        shutil.copy(REQUIREMENT_CHECK_IO_YAML, folder / "io.yaml")
    return folder


def library(root: Path, *kinds: str, base: str = "granite-4.1-3b",
            intrinsic: str = "requirement-check") -> Path:
    for kind in kinds:
        write_adapter(root / intrinsic / base / kind,
                      invocation=INVOCATION if kind == "alora" else None)
    return root


# --- base model names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("ibm-granite/granite-4.1-3b", "granite-4.1-3b"),
        ("granite-4.1-3b", "granite-4.1-3b"),
        ("/models/granite-4.1-3b/", "granite-4.1-3b"),
        (Path("/models/tiny-llama"), "tiny-llama"),
        ("/cache/hub/models--ibm-granite--granite-4.1-3b/snapshots/" + "a" * 40,
         "granite-4.1-3b"),
    ],
)
def test_base_model_name_canonicalises(model, name):
    assert base_model_name(model) == name


@pytest.mark.parametrize("model", ["", "/", "."])
def test_base_model_name_refuses_empty_names(model):
    with pytest.raises(AdapterError, match="base model name"):
        base_model_name(model)


def test_library_subpath():
    assert library_subpath("requirement-check", BASE, "alora") == (
        "requirement-check/granite-4.1-3b/alora")
    with pytest.raises(AdapterError, match="kind"):
        library_subpath("requirement-check", BASE, "dora")
    with pytest.raises(AdapterError, match="single folder name"):
        library_subpath("../etc", BASE, "lora")


# --- folders ---------------------------------------------------------------------------------


def test_reading_an_alora_folder(tmp_path):
    folder = write_adapter(tmp_path / "a", invocation=INVOCATION)
    adapter = read_adapter_folder(folder)
    assert adapter.path == folder.resolve()
    assert adapter.kind is AdapterKind.ALORA and adapter.kind == "alora"
    assert adapter.invocation_tokens == tuple(INVOCATION)
    assert adapter.base_model_name_or_path == BASE
    assert adapter.io_config.fast_path_spec() is not None
    assert adapter.weights_path.is_file() and adapter.config_path.is_file()
    assert adapter.intrinsic is None


def test_reading_a_lora_folder(tmp_path):
    adapter = read_adapter_folder(write_adapter(tmp_path / "l"))
    assert adapter.kind is AdapterKind.LORA
    assert adapter.invocation_tokens is None


@pytest.mark.parametrize(
    ("kwargs", "missing"),
    [({"weights": False}, "adapter_model.safetensors"), ({"io_yaml": False}, "io.yaml")],
)
def test_missing_files_are_named(tmp_path, kwargs, missing):
    folder = write_adapter(tmp_path / "x", **kwargs)
    with pytest.raises(AdapterError, match=missing) as info:
        read_adapter_folder(folder)
    assert str(folder) in str(info.value)


def test_missing_config_and_pickled_weights(tmp_path):
    folder = write_adapter(tmp_path / "x", weights=False)
    (folder / "adapter_model.bin").write_bytes(b"pickle")
    with pytest.raises(AdapterError, match="safetensors"):
        read_adapter_folder(folder)
    (folder / "adapter_config.json").unlink()
    with pytest.raises(AdapterError, match=r"adapter_config\.json"):
        read_adapter_folder(folder)


def test_a_missing_folder_is_not_found(tmp_path):
    with pytest.raises(AdapterNotFoundError, match="does not exist"):
        read_adapter_folder(tmp_path / "nothing")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"peft_type": "PREFIX_TUNING"}, "peft_type"),
        ({"alora_invocation_tokens": []}, "non-empty list"),
        ({"alora_invocation_tokens": [1, "2"]}, "non-empty list"),
        ({"alora_invocation_tokens": [1, True]}, "non-empty list"),
        ({"alora_invocation_tokens": [-1]}, "non-empty list"),
        ({"alora_invocation_tokens": "<requirements>"}, "non-empty list"),
        ({"base_model_name_or_path": 3}, "base_model_name_or_path"),
    ],
)
def test_bad_adapter_configs_are_refused(tmp_path, config, message):
    folder = write_adapter(tmp_path / "x", config=config)
    with pytest.raises(AdapterError, match=message):
        read_adapter_folder(folder)


def test_unparsable_adapter_config(tmp_path):
    folder = write_adapter(tmp_path / "x")
    (folder / "adapter_config.json").write_text("{not json")
    with pytest.raises(AdapterError, match="JSON"):
        read_adapter_folder(folder)
    (folder / "adapter_config.json").write_text("[1]")
    with pytest.raises(AdapterError, match="JSON object"):
        read_adapter_folder(folder)


def test_a_broken_io_yaml_surfaces_with_its_path(tmp_path):
    folder = write_adapter(tmp_path / "x")
    (folder / "io.yaml").write_text("response_format: null\ntransformations: null\nfoo: 1\n")
    with pytest.raises(IOConfigError, match="foo") as info:
        read_adapter_folder(folder)
    assert str(folder / "io.yaml") in str(info.value)


# --- libraries -------------------------------------------------------------------------------


def test_intrinsic_name_prefers_alora(tmp_path):
    root = library(tmp_path, "lora", "alora")
    adapter = resolve_adapter("requirement-check", base_model=BASE, roots=[root])
    assert adapter.kind is AdapterKind.ALORA
    assert adapter.intrinsic == "requirement-check"
    assert adapter.path == (root / "requirement-check/granite-4.1-3b/alora").resolve()


def test_kinds_choose_or_force_the_kind(tmp_path):
    both = library(tmp_path / "both", "lora", "alora")
    lora = resolve_adapter("requirement-check", base_model=BASE, roots=[both], kinds=("lora",))
    assert lora.kind is AdapterKind.LORA
    only_lora = library(tmp_path / "only", "lora")
    fallback = resolve_adapter("requirement-check", base_model=BASE, roots=[only_lora])
    assert fallback.kind is AdapterKind.LORA
    with pytest.raises(AdapterNotFoundError):
        resolve_adapter("requirement-check", base_model=BASE, roots=[only_lora],
                        kinds=("alora",), allow_hub=False)


def test_roots_are_searched_in_order(tmp_path):
    first = library(tmp_path / "first", "lora")
    second = library(tmp_path / "second", "alora")
    adapter = find_in_library("requirement-check", BASE, roots=[first, second])
    assert adapter.path.is_relative_to(first.resolve())
    adapter = find_in_library("requirement-check", BASE, roots=[tmp_path / "none", second])
    assert adapter.path.is_relative_to(second.resolve())


def test_a_mislabelled_folder_is_refused_not_skipped(tmp_path):
    write_adapter(tmp_path / "requirement-check/granite-4.1-3b/alora", invocation=None)
    library(tmp_path, "lora")
    with pytest.raises(AdapterError, match="'alora' folder"):
        resolve_adapter("requirement-check", base_model=BASE, roots=[tmp_path])


def test_not_found_lists_what_the_libraries_hold(tmp_path):
    root = library(tmp_path, "alora", base="granite-4.1-8b")
    with pytest.raises(AdapterNotFoundError) as info:
        resolve_adapter("requirement-check", base_model=BASE, roots=[root], allow_hub=False)
    message = str(info.value)
    assert "granite-4.1-3b" in message and "granite-4.1-8b" in message
    assert isinstance(info.value, LookupError)
    with pytest.raises(AdapterNotFoundError, match="no uncertainty/"):
        resolve_adapter("uncertainty", base_model=BASE, roots=[root])  # not in the catalog


def test_source_kinds_are_told_apart(tmp_path, monkeypatch):
    folder = write_adapter(tmp_path / "requirement-check", invocation=INVOCATION)
    monkeypatch.chdir(tmp_path)
    # A bare name is an intrinsic even when a folder of that name is in the cwd.
    with pytest.raises(AdapterNotFoundError):
        resolve_adapter("requirement-check", base_model=BASE, roots=[tmp_path / "lib"],
                        allow_hub=False)
    assert resolve_adapter("./requirement-check").path == folder.resolve()
    assert resolve_adapter(folder).path == folder.resolve()
    assert resolve_adapter(str(folder)).kind is AdapterKind.ALORA
    with pytest.raises(AdapterError, match="needs base_model"):
        resolve_adapter("requirement-check", roots=[tmp_path])
    with pytest.raises(AdapterError, match="not int"):
        resolve_adapter(3)  # type: ignore[arg-type]
    with pytest.raises(AdapterError, match="single folder name"):
        resolve_adapter("bad name!", base_model=BASE)


def test_default_roots_include_the_repo_library():
    roots = default_library_roots()
    repo_library = Path(__file__).resolve().parents[2] / "adapters"
    assert repo_library in roots
    assert all(root.is_dir() for root in roots)


# --- hub -------------------------------------------------------------------------------------


def test_catalog_pins_the_core_library():
    entry = catalog_entry("requirement-check")
    assert entry.repo_id == GRANITELIB_CORE_REPO == "ibm-granite/granitelib-core-r1.0"
    assert entry.revision == GRANITELIB_CORE_REVISION
    assert entry.revision.startswith("d0a2a96a") and len(entry.revision) == 40
    assert set(entry.adapter_kinds) == {"lora", "alora"}
    assert "requirement-check" in known_intrinsics() and "requirement-check" in CATALOG
    source = HubSource.from_catalog("requirement-check")
    assert (source.repo_id, source.revision) == (entry.repo_id, entry.revision)
    with pytest.raises(AdapterNotFoundError, match="requirement-check"):
        catalog_entry("summarisation")


# The peer's catalog (mellea 0.8 backends/adapters/catalog.py): name -> (library, pinned commit).
PEER_CATALOG = {
    "requirement-check": ("core", "d0a2a96a4cd07e96f0fe7ca29a42bfe088299d43"),
    "uncertainty": ("core", "d0a2a96a4cd07e96f0fe7ca29a42bfe088299d43"),
    "context-attribution": ("core", "d0a2a96a4cd07e96f0fe7ca29a42bfe088299d43"),
    "answerability": ("rag", "2f0b2c79c6731068625aca8045c2eb2e8912b353"),
    "citations": ("rag", "2f0b2c79c6731068625aca8045c2eb2e8912b353"),
    "context_relevance": ("rag", "2f0b2c79c6731068625aca8045c2eb2e8912b353"),
    "hallucination_detection": ("rag", "2f0b2c79c6731068625aca8045c2eb2e8912b353"),
    "query_clarification": ("rag", "2f0b2c79c6731068625aca8045c2eb2e8912b353"),
    "query_rewrite": ("rag", "2f0b2c79c6731068625aca8045c2eb2e8912b353"),
    "policy-guardrails": ("guardian", "773b254e98f993a605ec4b6259634906e0e64e8e"),
    "guardian-core": ("guardian", "773b254e98f993a605ec4b6259634906e0e64e8e"),
    "factuality-detection": ("guardian", "773b254e98f993a605ec4b6259634906e0e64e8e"),
    "factuality-correction": ("guardian", "773b254e98f993a605ec4b6259634906e0e64e8e"),
}


def test_catalog_holds_the_peers_thirteen_at_its_pins():
    assert set(known_intrinsics()) == set(PEER_CATALOG)
    for name, (library, revision) in PEER_CATALOG.items():
        entry = catalog_entry(name)
        assert entry.repo_id == f"ibm-granite/granitelib-{library}-r1.0"
        assert entry.revision == revision and entry.description
        source = HubSource.from_catalog(name)
        assert (source.repo_id, source.revision, source.intrinsic) == (
            entry.repo_id, revision, name)


@pytest.mark.parametrize("revision", ["main", "v1.0", "D0A2A96A" * 5, "d0a2a96a"])
def test_unpinned_revisions_are_refused(revision):
    with pytest.raises(AdapterError, match="40-character"):
        HubSource(GRANITELIB_CORE_REPO, revision, "requirement-check")
    with pytest.raises(AdapterError, match="40-character"):
        IntrinsicCatalogEntry(name="x", repo_id=GRANITELIB_CORE_REPO, revision=revision)


def test_bad_hub_sources_are_refused():
    with pytest.raises(AdapterError, match="owner/name"):
        HubSource("granitelib", GRANITELIB_CORE_REVISION, "requirement-check")
    with pytest.raises(AdapterError, match="single folder name"):
        HubSource(GRANITELIB_CORE_REPO, GRANITELIB_CORE_REVISION, "a/b")
    with pytest.raises(AdapterError, match="kinds"):
        IntrinsicCatalogEntry(name="x", repo_id=GRANITELIB_CORE_REPO,
                              revision=GRANITELIB_CORE_REVISION, adapter_kinds=("dora",))


def test_offline_cache_miss_fails_at_once_with_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(AdapterNotFoundError) as info:
        resolve_adapter("requirement-check", base_model=BASE, roots=[tmp_path / "empty"],
                        cache_dir=tmp_path / "hf-cache")
    assert time.monotonic() - started < 5.0
    message = str(info.value)
    assert "HF_HUB_OFFLINE=1" in message
    assert (f"hf download {GRANITELIB_CORE_REPO} --revision {GRANITELIB_CORE_REVISION} "
            "--include 'requirement-check/granite-4.1-3b/alora/*'") in message
    assert "local libraries" in message


def fake_hub_cache(cache: Path, *kinds: str) -> Path:
    """The HF cache layout snapshot_download reads offline: models--org--name/snapshots/<sha>."""
    snapshot = (cache / ("models--" + GRANITELIB_CORE_REPO.replace("/", "--"))
                / "snapshots" / GRANITELIB_CORE_REVISION)
    library(snapshot, *kinds)
    return snapshot


def test_a_cached_hub_snapshot_resolves_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = fake_hub_cache(tmp_path / "cache", "lora", "alora")
    adapter = resolve_adapter("requirement-check", base_model=BASE, roots=[],
                              cache_dir=tmp_path / "cache")
    assert adapter.kind is AdapterKind.ALORA
    assert adapter.path == (snapshot / "requirement-check/granite-4.1-3b/alora").resolve()


def test_a_cached_snapshot_without_alora_falls_back_to_lora(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_hub_cache(tmp_path / "cache", "lora")
    source = HubSource.from_catalog("requirement-check")
    adapter = resolve_adapter(source, base_model=BASE, cache_dir=tmp_path / "cache")
    assert adapter.kind is AdapterKind.LORA
    with pytest.raises(AdapterNotFoundError, match="not in the repo"):
        fetch_from_hub(source, BASE, kinds=("alora",), cache_dir=tmp_path / "cache")


# --- real PEFT adapters ----------------------------------------------------------------------


def test_adapters_saved_by_peft_resolve_with_their_kind(tiny_tokenizer, tmp_path):
    """The files PEFT writes (names, config keys) are what the library reads."""
    from peft import LoraConfig, get_peft_model

    from mellea_local.embedded import build_model

    invocation = tiny_tokenizer.encode("<requirements>", add_special_tokens=False)
    root = tmp_path / "lib"
    for kind, tokens in (("alora", invocation), ("lora", None)):
        model = build_model(tiny_tokenizer, hidden_size=32, num_layers=1)
        config = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM",
                            alora_invocation_tokens=tokens)
        folder = root / "requirement-check" / "tiny-llama" / kind
        get_peft_model(model, config).save_pretrained(folder)
        shutil.copy(REQUIREMENT_CHECK_IO_YAML, folder / "io.yaml")

    alora = resolve_adapter("requirement-check", base_model="/models/tiny-llama", roots=[root])
    assert alora.kind is AdapterKind.ALORA
    assert alora.invocation_tokens == tuple(invocation)
    lora = resolve_adapter("requirement-check", base_model="tiny-llama", roots=[root],
                           kinds=("lora",))
    assert lora.kind is AdapterKind.LORA and lora.invocation_tokens is None
