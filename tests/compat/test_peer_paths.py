"""Replacing ``mellea`` by ``mellea_local`` is the whole port: the peer's module paths resolve
to our objects, and the peer's quick-start runs so rewritten, on the embedded model (no shim:
these are real modules of the package)."""

from __future__ import annotations

import contextlib
import importlib
import io
import logging

import peer_examples
import pytest

import mellea_local
from mellea_local.core import PEER_ALIASES


def port(code: str) -> str:
    """The whole port of a peer script."""
    return code.replace("mellea", "mellea_local")


def run(code: str) -> tuple[dict, str]:
    namespace: dict = {"__name__": "__peer_example__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(port(code), "<peer example>", "exec"), namespace)
    return namespace, out.getvalue()


def test_the_peer_imports_resolve_to_our_objects():
    ns, _ = run(peer_examples.PEER_IMPORTS)
    same = {
        "req": mellea_local.req, "check": mellea_local.check,
        "simple_validate": mellea_local.simple_validate,
        "Requirement": mellea_local.Requirement, "CoreRequirement": mellea_local.Requirement,
        "ALoraRequirement": mellea_local.ALoraRequirement,
        "ALoraRequirement2": mellea_local.ALoraRequirement,
        "LLMaJRequirement": mellea_local.LLMaJRequirement, "reqify": mellea_local.reqify,
        "requirement_check_to_bool": mellea_local.requirement_check_to_bool,
        "Message": mellea_local.Message, "ToolMessage": mellea_local.ToolMessage,
        "as_chat_history": mellea_local.as_chat_history,
        "as_generic_chat_history": mellea_local.as_generic_chat_history,
        "message_from_template_representation":
            mellea_local.message_from_template_representation,
        "Document": mellea_local.Document, "Instruction": mellea_local.Instruction,
        "CBlock": mellea_local.CBlock, "CoreCBlock": mellea_local.CBlock,
        "Component": mellea_local.Component,
        "ReactInitiator": mellea_local.ReactInitiator, "ReactThought": mellea_local.ReactThought,
        "MELLEA_FINALIZER_TOOL": mellea_local.MELLEA_FINALIZER_TOOL,
        "react": mellea_local.react,
        "ChatContext": mellea_local.ChatContext, "SimpleContext": mellea_local.SimpleContext,
        "WindowCompactor": mellea_local.WindowCompactor,
        "LLMSummarizeCompactor": mellea_local.LLMSummarizeCompactor,
        "pin_system": mellea_local.pin_system,
        "RejectionSamplingStrategy": mellea_local.RejectionSamplingStrategy,
        "RepairTemplateStrategy": mellea_local.RepairTemplateStrategy,
        "MultiTurnStrategy": mellea_local.MultiTurnStrategy,
        "BaseSamplingStrategy": mellea_local.BaseSamplingStrategy,
        "SamplingResult": mellea_local.SamplingResult,
        "CoreSamplingResult": mellea_local.SamplingResult,
        "start_session": mellea_local.start_session, "MelleaSession": mellea_local.MelleaSession,
        "Backend": mellea_local.Backend, "Context": mellea_local.Context,
        "ModelOutputThunk": mellea_local.ModelOutputThunk,
        "ValidationResult": mellea_local.ValidationResult,
        "PartialValidationResult": mellea_local.PartialValidationResult,
        "default_output_to_bool": mellea_local.default_output_to_bool,
        "ModelOption": mellea_local.ModelOption, "ModelOption2": mellea_local.ModelOption,
        "ModelIdentifier": mellea_local.ModelIdentifier,
        "MelleaTool": mellea_local.MelleaTool, "MelleaTool2": mellea_local.MelleaTool,
        "tool": mellea_local.tool, "LocalHFBackend": mellea_local.LocalHFBackend,
    }
    for name, ours in same.items():
        assert ns[name] is ours, name


@pytest.mark.parametrize("module", [
    "mellea_local.stdlib", "mellea_local.stdlib.requirements",
    "mellea_local.stdlib.requirements.requirement", "mellea_local.stdlib.components",
    "mellea_local.stdlib.components.chat", "mellea_local.stdlib.components.instruction",
    "mellea_local.stdlib.components.react", "mellea_local.stdlib.frameworks",
    "mellea_local.stdlib.frameworks.react", "mellea_local.stdlib.context",
    "mellea_local.stdlib.context.compactor", "mellea_local.stdlib.sampling",
    "mellea_local.stdlib.session", "mellea_local.backends", "mellea_local.backends.model_options",
    "mellea_local.backends.model_ids", "mellea_local.backends.tools",
])
def test_each_mirror_is_a_documented_re_export_of_our_objects(module):
    mod = importlib.import_module(module)
    assert "mirror" in (mod.__doc__ or "").lower()
    for name in getattr(mod, "__all__", []):
        value = getattr(mod, name)
        # Defined elsewhere in the package: a re-export, never a look-alike.
        home = getattr(value, "__module__", None) or ""
        assert not home.startswith("mellea_local.stdlib"), (module, name)
        assert home != module or module == "mellea_local.backends", (module, name)


def test_a_peer_name_we_lack_is_an_import_error_naming_it():
    with pytest.raises(ImportError, match="GroundednessRequirement"):
        exec("from mellea_local.stdlib.requirements import GroundednessRequirement", {})
    with pytest.raises(AttributeError, match="Formatter"):
        _ = mellea_local.core.Formatter


def test_core_aliases_are_the_documented_table_only():
    assert set(PEER_ALIASES) == {"Requirement", "ValidationResult", "PartialValidationResult",
                                 "default_output_to_bool", "SamplingResult"}
    for name in PEER_ALIASES:
        assert getattr(mellea_local.core, name) is getattr(mellea_local, name)


# --- The peer's quick-start, ported by renaming, on the embedded model ------------------------
# tests/conftest.py pins MELLEA_LOCAL_DEFAULT_MODEL=embedded, so start_session() is the
# embedded model here whether or not SmolLM2 is in the cache.


def _complete_or_marked(thunk) -> None:
    assert thunk.finish_reason in ("stop", "length")
    assert thunk.truncated is (thunk.finish_reason == "length")


def test_the_quickstart_hello_world_runs_ported():
    ns, printed = run(peer_examples.QUICKSTART_HELLO)
    assert isinstance(ns["m"], mellea_local.MelleaSession)
    assert type(ns["m"].backend) is mellea_local.LocalHFBackend
    assert ns["m"].backend.model_id.endswith("mellea-tiny-chat")
    email = ns["email"]
    assert isinstance(email, mellea_local.ComputedModelOutputThunk)
    assert printed == str(email) + "\n" and str(email).strip()
    _complete_or_marked(email)


def test_the_quickstart_requirements_example_runs_ported():
    ns, printed = run(peer_examples.QUICKSTART_REQUIREMENTS)
    assert isinstance(ns["m"], mellea_local.MelleaSession) and printed.strip()
    last = ns["m"].ctx.last_output()
    assert isinstance(last, mellea_local.ComputedModelOutputThunk)
    _complete_or_marked(last)


def test_the_verifiers_example_runs_ported():
    ns, printed = run(peer_examples.VERIFIERS)
    assert ns["req"] is mellea_local.req and ns["check"] is mellea_local.check
    assert ns["Requirement"] is mellea_local.Requirement
    assert isinstance(ns["result"], mellea_local.ComputedModelOutputThunk)
    assert printed == str(ns["result"]) + "\n"
    # The full validator ran on our context type, through our ValidationResult.
    verdict = ns["validate_email_format"](
        mellea_local.ChatContext().add(mellea_local.Message("user", "x")).add(
            mellea_local.Message("assistant", "support@example.com")))
    assert isinstance(verdict, mellea_local.ValidationResult)


def test_start_session_without_a_model_says_in_one_line_that_the_demo_model_answers(
        monkeypatch, tmp_path, caplog):
    monkeypatch.delenv("MELLEA_LOCAL_DEFAULT_MODEL", raising=False)
    monkeypatch.setenv("MELLEA_LOCAL_MODELS", str(tmp_path))  # an empty model cache
    with caplog.at_level(logging.WARNING, logger="mellea_local.session"):
        m = mellea_local.start_session()
    assert m.backend.model_id.endswith("mellea-tiny-chat")
    [record] = [r for r in caplog.records if r.name == "mellea_local.session"]
    text = record.getMessage()
    assert "\n" not in text and "embedded demo model" in text and "3 M parameters" in text
    assert "`mellea-local models get smollm2-135m`" in text and "model_id=" in text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mellea_local.session"):
        mellea_local.start_session(model_id="embedded")  # asked for by name: nothing said
    assert not [r for r in caplog.records if r.name == "mellea_local.session"]


def test_the_default_model_prefers_the_cached_real_model(monkeypatch, tmp_path):
    from mellea_local.session import default_model

    monkeypatch.delenv("MELLEA_LOCAL_DEFAULT_MODEL", raising=False)
    monkeypatch.setenv("MELLEA_LOCAL_MODELS", str(tmp_path))
    assert default_model() == ("embedded", True)
    # The folder `models get` writes (model_status finds it; the load verifies it).
    monkeypatch.setattr("mellea_local.models.model_status", lambda name: tmp_path)
    assert default_model() == ("smollm2-135m", False)
    monkeypatch.setenv("MELLEA_LOCAL_DEFAULT_MODEL", "embedded")
    assert default_model() == ("embedded", False)
