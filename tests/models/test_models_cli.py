"""``mellea-local models``: get a model from a wheel, find it by path, list it; one error line."""

from __future__ import annotations

import zipfile

import pytest
from typer.testing import CliRunner

from mellea_local.cli import app
from mellea_local.models import MODELS, ModelSpec, sha256_file

runner = CliRunner()


@pytest.fixture()
def tiny(tiny_gguf, tmp_path, monkeypatch):
    wheel = tmp_path / "tiny_model-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(tiny_gguf, "tiny_model/mellea-tiny-chat.gguf")
    spec = ModelSpec(
        name="tiny-cli", base_name="mellea-tiny-chat", package="tiny-model", version="0.1",
        wheel=wheel.name, wheel_sha256=sha256_file(wheel),
        member="tiny_model/mellea-tiny-chat.gguf", gguf_sha256=sha256_file(tiny_gguf),
        license="Apache-2.0", summary="the embedded model as a GGUF")
    monkeypatch.setitem(MODELS, spec.name, spec)
    monkeypatch.setenv("MELLEA_LOCAL_MODELS", str(tmp_path / "cache"))
    return wheel


def test_path_before_get_names_the_get_command(tiny):
    result = runner.invoke(app, ["models", "path", "tiny-cli"])
    assert result.exit_code == 1
    assert "mellea-local models get tiny-cli" in result.output
    assert result.output.strip().splitlines()[-1].startswith("error:")


def test_get_prints_progress_and_the_folder_that_path_then_prints(tiny, tmp_path):
    got = runner.invoke(app, ["models", "get", "tiny-cli", "--wheel", str(tiny)])
    assert got.exit_code == 0, got.output
    folder = got.stdout.strip().splitlines()[-1]
    assert folder.startswith(str(tmp_path / "cache")) and folder.endswith("mellea-tiny-chat")
    assert "verifying" in got.stderr and "ready at" in got.stderr
    assert runner.invoke(app, ["models", "path", "tiny-cli"]).stdout.strip() == folder
    listed = runner.invoke(app, ["models", "list"])
    assert listed.exit_code == 0 and "tiny-cli" in listed.output and "present" in listed.output


def test_an_unknown_name_is_one_error_line():
    result = runner.invoke(app, ["models", "get", "no-such-model"])
    assert result.exit_code == 1
    assert "registered: " in result.output and "smollm2-135m" in result.output


def test_command_line_model_args_take_a_gguf_and_a_registered_name(tiny, tiny_gguf):
    """``--model file.gguf`` and ``--model <name>`` pass the argument check (it used to ask a
    GGUF for config.json), and an ``--adapter`` intrinsic is looked up under the converted
    model's name, where the embedded libraries fit it."""
    from mellea_local.launch import check_model_args

    runner.invoke(app, ["models", "get", "tiny-cli", "--wheel", str(tiny)])
    check_model_args(str(tiny_gguf), adapter="requirement-check")
    check_model_args("tiny-cli", adapter="requirement-check")
