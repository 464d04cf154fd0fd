"""What a new user meets first: --version, slash commands in chat, a readable backend repr,
and no library noise (FutureWarning, "Loading weights" bar) when a model or adapter loads."""

from __future__ import annotations

import subprocess
import sys
import warnings

from doubles import ScriptedBackend
from rich.console import Console
from typer.testing import CliRunner

from mellea_local import __version__
from mellea_local.backends.quiet import quiet_loading
from mellea_local.cli import app
from mellea_local.cli.chat import run_chat

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"mellea-local {__version__}"


def test_slash_commands_never_reach_the_model(monkeypatch):
    backend = ScriptedBackend.scripted(["one"])
    inputs = iter(["/help", "/frobnicate", "hello", "/quit"])
    monkeypatch.setattr("builtins.input", lambda _prompt="": next(inputs))
    console = Console(record=True, width=200)
    assert run_chat(backend, console=console) == 1
    assert len(backend.generate_calls) == 1  # only "hello"
    text = console.export_text()
    assert "/reset" in text and "/quit" in text
    assert "unknown command /frobnicate" in text


def test_backend_repr_names_model_device_dtype_and_adapters(cli_model):
    from mellea_local.backends.huggingface import LocalHFBackend

    model_dir, adapter_dir = cli_model
    backend = LocalHFBackend(model_dir, device="cpu")
    backend.add_adapter(adapter_dir, name="judge")
    assert repr(backend) == (f"LocalHFBackend(model={str(model_dir)!r}, device='cpu', "
                             "dtype='float32', adapters=['judge'])")


def test_quiet_loading_keeps_other_warnings():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_loading():
            warnings.warn("`is_gradient_checkpointing` is deprecated and will go",
                          FutureWarning, stacklevel=1)
            warnings.warn("ours", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["ours"]


def test_loading_the_embedded_model_prints_nothing():
    code = "from mellea_local import LocalHFBackend; LocalHFBackend.embedded()"
    done = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True,
                          text=True, timeout=600, env={"HF_HUB_OFFLINE": "1", "PATH": ""})
    assert done.returncode == 0, done.stderr
    assert "FutureWarning" not in done.stderr and "Loading weights" not in done.stderr
    assert done.stderr.strip() == "" and done.stdout.strip() == ""
