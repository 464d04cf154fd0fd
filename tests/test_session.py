"""start_session / MelleaSession: the peer's entry point, on the embedded model and scripted.

The quick-start runs as the peer's users write it: once through our names, once verbatim
through the `mellea` name mapping the compatibility harness uses (tests/compat/peer_shim.py).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from doubles import ScriptedBackend

from mellea_local import (
    ChatContext,
    ComputedModelOutputThunk,
    MelleaSession,
    Message,
    ModelOption,
    Requirement,
    SamplingResult,
    SimpleContext,
    start_session,
)
from mellea_local.errors import UnsupportedInputError

ROOT = Path(__file__).resolve().parents[1]


def rc(p: float) -> str:
    return json.dumps({"requirement_check": {"score": p}})


@pytest.fixture(scope="module")
def session() -> MelleaSession:
    return start_session(model_options={ModelOption.MAX_NEW_TOKENS: 48})


def test_quick_start_on_the_embedded_model_checks_requirements_on_the_kv_reuse_path(session):
    session.reset()
    backend = session.backend
    assert backend.supports_intrinsic("requirement-check")  # the shipped aLoRA
    before = backend.stats.total
    email = session.instruct(
        "Write an email to invite all interns to the office party.",
        requirements=["be formal", "Use 'Dear Interns' as greeting."],
        return_sampling_results=True,
    )
    assert isinstance(email, SamplingResult)
    checks = [v for attempt in email.attempts for v in attempt.validations]
    assert len(checks) == 2 * len(email.attempts)
    # Judged by the adapter (a score), not by asking the model yes/no (no score).
    assert all(v.score is not None for v in checks)
    after = backend.stats.total
    assert after.reused_tokens > before.reused_tokens  # the checks reused the prompt's cache
    reply = session.chat("What is the capital of France?")
    assert isinstance(reply, Message) and reply.role == "assistant" and reply.content
    # SimpleContext: the history is kept, but each call was generated fresh.
    assert isinstance(session.ctx, SimpleContext) and len(session.ctx.as_list()) == 4
    assert session.last_prompt() == [
        {"role": "user", "content": "What is the capital of France?"}]


def test_peer_quick_start_runs_unchanged_through_the_name_mapping(tmp_path):
    script = tmp_path / "quick_start.py"
    script.write_text(textwrap.dedent('''
        import sys
        sys.path.insert(0, sys.argv[1])
        import peer_shim
        peer_shim.install()

        # --- the peer's quick-start, verbatim from here on ---
        import mellea
        from mellea import start_session
        from mellea.backends import ModelOption

        m = start_session(model_options={ModelOption.MAX_NEW_TOKENS: 200})
        email_v1 = m.instruct(
            "Write an email to invite all interns to the office party.",
            requirements=["be formal", "Use 'Dear Interns' as greeting."],
        )
        print("EMAIL", repr(str(email_v1)))
        answer = m.chat("What is 2 + 2?")
        print("CHAT", answer.role, repr(answer.content))
        with mellea.start_session() as m2:
            print("INSTRUCT", type(m2.instruct("Say hello.")).__name__)
    '''))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(script), str(ROOT / "tests" / "compat")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("EMAIL '") for line in lines)
    assert any(line.startswith("CHAT assistant '") for line in lines)
    assert "INSTRUCT ComputedModelOutputThunk" in lines


def scripted_session(replies=(), *, scores=(), ctx=None, routed=False) -> MelleaSession:
    backend = ScriptedBackend.scripted(
        replies, scores=scores, intrinsics=["requirement-check"] if routed else [])
    return MelleaSession(backend, ctx)


def test_instruct_samples_until_the_requirements_hold_and_judges_the_exchange():
    m = scripted_session(["draft", "better"], scores=[rc(0.1), rc(0.9)], routed=True)
    out = m.instruct("Write {{what}}.", requirements=["is good"],
                     user_variables={"what": "a note"})
    assert isinstance(out, ComputedModelOutputThunk) and out.value == "better"
    first, _ = m.backend.score_calls
    # SimpleContext session: the adapter judged the instruction and the answer, not nothing.
    assert [type(e).__name__ for e in first.ctx.as_list()] == [
        "Instruction", "ComputedModelOutputThunk"]
    assert "Write a note." in str(first.ctx.as_list()[0].format_for_llm().args)
    assert [str(e) for e in m.ctx.as_list()[-1:]] == ["better"]
    assert isinstance(m.ctx, SimpleContext) and len(m.ctx.as_list()) == 2


def test_chat_context_sessions_keep_the_conversation_and_validate_over_it():
    m = scripted_session(["hi", "Paris."], scores=[rc(0.8)], ctx=ChatContext(), routed=True)
    assert m.chat("hello").content == "hi"
    assert m.chat("Capital of France?").content == "Paris."
    assert [getattr(e, "content", str(e)) for e in m.ctx.as_list()] == [
        "hello", "hi", "Capital of France?", "Paris."]
    assert [r.as_bool() for r in m.validate(["names Paris"])] == [True]
    assert len(m.backend.score_calls[0].ctx.as_list()) == 4
    assert [d["content"] for d in m.last_prompt()] == ["hello", "hi", "Capital of France?"]


def test_act_returns_sampling_results_on_request_and_strategy_none_generates_once():
    m = scripted_session(["one"])
    result = m.act(Message("user", "go"), strategy=None, return_sampling_results=True)
    assert isinstance(result, SamplingResult) and result.value == "one"
    assert len(m.backend.generate_calls) == 1


async def test_async_twins_and_the_sync_verbs_refuse_a_running_loop():
    m = scripted_session(["a", "b"], ctx=ChatContext())
    assert (await m.ainstruct("x", strategy=None)).value == "a"
    assert (await m.achat("y")).content == "b"
    with pytest.raises(RuntimeError, match=r"await session\.achat"):
        m.chat("z")


def test_model_binding_reset_copy_and_context_manager():
    backend = ScriptedBackend.scripted(["a"])
    backend.model_id = "org/model"  # type: ignore[attr-defined]
    with MelleaSession(backend, ChatContext(window_size=3)) as m:
        assert m.ctx.model_id == "org/model"
        m.chat("hi")
        clone = copy.copy(m)
        assert clone.id != m.id and clone.ctx is m.ctx
        m.reset()
        assert m.ctx.as_list() == [] and m.ctx.model_id == "org/model"
        assert m.ctx.compactor is not None  # the configuration survives a reset
    assert MelleaSession(backend, ChatContext().add(Message("user", "x"))).ctx.model_id is None
    assert isinstance(MelleaSession(backend).ctx, SimpleContext)


def test_unsupported_inputs_are_refused_with_the_fix():
    m = scripted_session(["a"])
    with pytest.raises(UnsupportedInputError, match="grounding_context"):
        m.instruct("x", grounding_context={"doc": "text"})
    with pytest.raises(UnsupportedInputError, match="validate"):
        m.instruct("x", requirements=[Requirement("r")], tool_calls=True)
    with pytest.raises(UnsupportedInputError, match="backend_name='hf'"):
        start_session("ollama")
    with pytest.raises(ValueError, match="Cannot specify both"):
        start_session(ctx=ChatContext(), context_type="chat")
    with pytest.raises(ValueError, match="context_type"):
        start_session(context_type="graph")
    assert m.backend.generate_calls == []


def test_context_type_chat_gives_a_chat_context_bound_to_the_model():
    m = start_session(context_type="chat")
    assert isinstance(m.ctx, ChatContext) and m.ctx.model_id == m.backend.model_id
    assert m.ctx.view_for_generation() == []
