"""The shipped embedded model end to end: real trained weights, real adapters, real product path.

These tests load ``LocalHFBackend.embedded()`` (the safetensors under
``mellea_local/embedded/weights/`` and the adapters under ``adapters/``) and check what a user
relies on: requirement checks that get clear cases right with both adapters, aLoRA scores that
do not depend on KV reuse or batching, and a base model that calls the calculator and finishes
a ReACT task.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from embedded_lab import synthetic as S

from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.bench.accuracy import context_of
from mellea_local.core.context import ChatContext
from mellea_local.embedded.corpus import REQUIREMENT_PHRASINGS
from mellea_local.intrinsics.requirement_check import check_outputs
from mellea_local.messages import Message
from mellea_local.options import ModelOption
from mellea_local.requirements.requirement import requirement_check_score

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4
SIX = [p.format(word="Paris", n=4) for p in REQUIREMENT_PHRASINGS]


@pytest.fixture(scope="module")
def embedded() -> LocalHFBackend:
    return LocalHFBackend.embedded()


def _chat(answer: str, question: str = "What is the capital of France?") -> ChatContext:
    return ChatContext().add(Message("user", question)).add(Message("assistant", answer))


async def _scores(backend, ctx, requirements, *, kind: str, **kwargs) -> list[float]:
    adapter = backend.adapters[f"requirement-check_{kind}"]
    outputs = await check_outputs(backend, ctx, requirements, adapter=adapter, **kwargs)
    return [requirement_check_score(o) for o in outputs]


# ----- loading -------------------------------------------------------------------------------


def test_embedded_loads_the_shipped_base_with_both_adapters(embedded):
    assert embedded.base_model_name == "mellea-tiny-chat"
    assert 1_000_000 < embedded.base_parameter_count <= 10_000_000
    assert embedded.base_parameter_count < sum(p.numel() for p in embedded.model.parameters())
    adapters = embedded.adapters
    assert set(adapters) == {"requirement-check_alora", "requirement-check_lora"}
    assert adapters["requirement-check_alora"].is_alora
    assert not adapters["requirement-check_lora"].is_alora
    # The intrinsic is served by the aLoRA, found in the repo's library.
    assert embedded.adapter_for("requirement-check").name == "requirement-check_alora"
    assert adapters["requirement-check_alora"].path == (
        ROOT / "adapters" / "requirement-check" / "mellea-tiny-chat" / "alora")


def test_shipped_files_fit_the_size_budget():
    weights = ROOT / "mellea_local" / "embedded" / "weights" / "mellea-tiny-chat"
    library = ROOT / "adapters" / "requirement-check" / "mellea-tiny-chat"
    files = [*weights.rglob("*"), *library.rglob("*")]
    assert sum(f.stat().st_size for f in files if f.is_file()) <= 25 * 2**20
    assert not [f for f in files if f.suffix in {".bin", ".pt", ".pkl"}]
    for kind in ("alora", "lora"):
        config = json.loads((library / kind / "adapter_config.json").read_text())
        assert (config.get("alora_invocation_tokens") is not None) == (kind == "alora")
        assert (library / kind / "io.yaml").is_file()


# ----- requirement checks on the trained adapters ----------------------------------------------


async def test_all_caps_check_passes_on_capitals_and_fails_on_lowercase(embedded):
    """The intrinsic's adapter (the aLoRA)."""
    requirement = ["The response is written in all capital letters."]
    [caps] = await _scores(embedded, _chat("THE CAPITAL OF FRANCE IS PARIS."), requirement,
                           kind="alora")
    [lower] = await _scores(embedded, _chat("the capital of france is paris."), requirement,
                            kind="alora")
    assert caps > 0.5 > lower, (caps, lower)


async def test_mentions_check_looks_the_word_up_in_the_answer(embedded):
    """Whole word, any case: at most one of ten fixed answers wrong.

    The shipped aLoRA is right on 95 % of held-out "mentions" checks (embedded.json), and on
    these ten it misses one: "Rivers of words." (0.99: the plural is not the whole word). The
    float32-trained one before it missed "The River is cold." instead (0.19, now 0.99); the
    all-layer aLoRA on the unrefined base missed two ("THE HILL IS COLD." at 0.53, now 0.01)
    and put a one-word "Paris." at 0.51 (now 0.99). Before the base learned
    to look words up (``mention_batch``) the three answers this test then held (the first of
    each list and "The River is cold.") all scored 0.58-0.61. Since the adapters also train on
    chat answers (``adapter_chat_share``) the demo's own answer passes and a word only the
    question says fails."""
    requirement = ["The response mentions river."]
    question = "Tell me about the hill."
    said = ["Green river near the farm.", "The River is cold.", "THE RIVER IS COLD.",
            "Cold River water.", "River water is cold."]
    absent = ["Green hill near the farm.", "The hill is cold.", "THE HILL IS COLD.",
              "Cold Hill water.", "Rivers of words."]
    scores = {answer: (await _scores(embedded, _chat(answer, question), requirement,
                                     kind="alora"))[0] for answer in said + absent}
    wrong = [a for a, p in scores.items() if (p > 0.5) != (a in said)]
    assert len(wrong) <= 1, scores
    capital = "What is the capital of France?"
    [demo] = await _scores(embedded, _chat("The capital of France is Paris.", capital),
                           ["The response mentions Paris."], kind="alora")
    [asked] = await _scores(embedded, _chat("The capital of Japan is Tokyo.", capital),
                            ["The response mentions France."], kind="alora")
    [alone] = await _scores(embedded, _chat("Paris.", capital),
                            ["The response mentions Paris."], kind="alora")
    assert demo > 0.5 > asked, (demo, asked)
    assert alone > 0.5, alone


async def test_kv_reuse_and_batching_do_not_change_alora_scores(embedded):
    ctx = _chat("IS THE CAPITAL OF FRANCE PARIS?")
    embedded.prefix_cache.clear()
    batched = await _scores(embedded, ctx, SIX, kind="alora")  # cold, then the cache holds it
    reused = await _scores(embedded, ctx, SIX, kind="alora")
    scratch = await _scores(embedded, ctx, SIX, kind="alora", reuse=False)
    single = [(await _scores(embedded, ctx, [r], kind="alora"))[0] for r in SIX]
    assert embedded.stats.last.reused_tokens > 0
    for got in (reused, scratch, single):
        assert got == pytest.approx(batched, abs=TOL)


async def test_a_held_out_sample_is_well_above_chance(embedded):
    """60 fresh checks (10 per family): a regression to chance (50 %) cannot pass 75 %.

    The shipped aLoRA scores ~98 % on average over the families (embedded.json), 95 % on the
    weakest ("mentions"); this guards against a collapse, not that figure.
    """
    examples = S.check_examples(random.Random(424_242), 10)
    right = 0
    for ex in examples:
        [score] = await _scores(embedded, context_of(ex.messages), [ex.requirement],
                                kind="alora")
        right += (score > 0.5) == ex.label
    assert right >= 0.75 * len(examples), right


# ----- the base model ----------------------------------------------------------------------------


async def test_the_base_answers_a_capital_question(embedded):
    ctx = ChatContext()
    mot, _ = await embedded.generate_from_context(
        Message("user", "What is the capital of France?"), ctx,
        model_options={ModelOption.MAX_NEW_TOKENS: 24})
    assert "Paris" in await mot.avalue()


async def test_thinking_mode_writes_reasoning_then_an_answer(embedded):
    mot, _ = await embedded.generate_from_context(
        Message("user", "What is the capital of Japan?"), ChatContext(),
        model_options={ModelOption.MAX_NEW_TOKENS: 64, ModelOption.THINKING: True})
    answer = await mot.avalue()
    assert mot.thinking and "Japan" in mot.thinking
    assert "Tokyo" in answer


async def test_the_base_solves_most_fresh_calculator_and_lookup_tasks(embedded):
    """Real tool calls through the real loop, judged against the tools' own answers."""
    from mellea_local.react import react

    rng = random.Random(2_026)
    solved, calls_right = 0, 0
    tasks = [S.react_task(rng, kind=kind) for kind in ("calculator", "lookup") for _ in range(6)]
    for task in tasks:
        out, ctx = await react(task.goal, ChatContext(), embedded, tools=S.react_tools(task),
                               loop_budget=4, model_options={ModelOption.MAX_NEW_TOKENS: 64})
        solved += out.value.strip() == task.answer
        first = next(m for m in ctx.as_list() if getattr(m, "tool_calls", None))
        [call] = first.tool_calls
        argument = "expression" if task.tool == "calculator" else "key"
        calls_right += (call.name, call.args) == (task.tool, {argument: task.argument})
    assert calls_right >= 8 and solved >= 7, (calls_right, solved)


# ----- the product paths a new user meets first ------------------------------------------------


def _run(*args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "mellea_local", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


def test_demo_runs_every_act_offline():
    result = _run("demo")
    assert result.returncode == 0, result.stderr[-2000:]
    for act in ("1. An answer", "2. Requirement checks", "3. The same six checks",
                "4. A ReACT agent", "5. Instruct", "done in"):
        assert act in result.stdout, act
    assert "final answer" in result.stdout and "attempt 1" in result.stdout
    assert "truth" in result.stdout  # the Python rule beside each verdict


async def test_check_command_on_the_embedded_model_reports_the_library_accuracy(
        embedded, tmp_path):
    """A labelled dataset through the CLI (a subprocess): the accuracy it prints is the one the
    library's own checks imply, line by line."""
    examples = S.check_examples(random.Random(31_337), 2)
    data = tmp_path / "held_out.jsonl"
    data.write_text("".join(json.dumps({"id": f"h{i}", "messages": ex.messages,
                                        "requirement": ex.requirement, "label": ex.label}) + "\n"
                            for i, ex in enumerate(examples)))
    out = tmp_path / "scores.jsonl"
    result = _run("check", str(data), "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == [f"h{i}" for i in range(len(examples))]
    right = 0
    from mellea_local.requirements.verify import route, verify

    for ex, record in zip(examples, records, strict=True):
        # Routing is on by default: a requirement a program decides exactly is decided by it
        # (decided_by names it), the rest by the aLoRA.
        mapping = route(ex.requirement, ex.messages[0]["content"])
        if mapping is None:
            assert record["decided_by"] == ["adapter"]
            [score] = await _scores(embedded, context_of(ex.messages), [ex.requirement],
                                    kind="alora")
            assert record["scores"] == [pytest.approx(score, abs=TOL)]
        else:
            assert record["decided_by"] == [mapping.decider()]
            score = 1.0 if verify(mapping, ex.messages[-1]["content"]) else 0.0
            assert record["scores"] == [score]
        right += (score > 0.5) == ex.label
    assert f"accuracy: {right / len(examples):.4f}" in result.stdout


async def test_rejection_sampling_replaces_a_failing_first_sample(embedded):
    """The demo's instruct act: its seed gives a first sample that misses the requirement."""
    from mellea_local.cli.demo import INSTRUCT_OPTIONS, INSTRUCT_REQUIREMENT, INSTRUCTION
    from mellea_local.sampling import RejectionSamplingStrategy, ainstruct

    result = await ainstruct(
        INSTRUCTION, ChatContext(), embedded, requirements=[INSTRUCT_REQUIREMENT],
        strategy=RejectionSamplingStrategy(loop_budget=4), model_options=INSTRUCT_OPTIONS)
    first, *_ = result.attempts
    assert not first.passed and result.success
    assert result.result is result.attempts[-1].sample and len(result.attempts) >= 2
    # The verdicts are the aLoRA's: the chosen sample scores above 0.5, the first below.
    assert result.attempts[-1].validations[0].score > 0.5 > first.validations[0].score


TINY_RUN = ["copy_steps=2", "hidden_size=32", "num_layers=1", "num_heads=2", "num_kv_heads=1",
            "intermediate_size=64", "base_steps=3", "refine_steps=0", "chat_examples=60",
            "react_examples=6", "self_check_examples=60", "echo_examples=20", "feature_layer=1",
            "adapter_first_layer=0", "adapter_steps=3", "adapter_batch=4", "adapter_rank=2"]


def _train(out: Path, *extra: str) -> str:
    """A tiny run of the real training script into ``out/base`` and ``out/adapters``; its log."""
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train_embedded.py"), "--weights",
         str(out / "base"), "--adapters", str(out / "adapters"), "--set", *TINY_RUN, *extra],
        check=True, capture_output=True, text=True, timeout=600).stdout


def test_the_shipped_base_answers_its_own_held_out_self_checks(train_script):
    """The diagnostic train_embedded logs while the base trains, on the shipped base: its
    figures match what its aLoRA reaches (README table), so a base that missed a concept
    shows it here in seconds."""
    from transformers import AutoModelForCausalLM

    from mellea_local.embedded import build_tokenizer

    base = AutoModelForCausalLM.from_pretrained(
        ROOT / "mellea_local" / "embedded" / "weights" / "mellea-tiny-chat")
    accuracy = train_script.base_self_check(base, build_tokenizer(), n_per_family=40)
    assert sorted(accuracy) == sorted(S.FAMILIES)
    assert accuracy["all_caps"] >= 0.9 and accuracy["max_words"] >= 0.85
    assert accuracy["mentions"] >= 0.8  # the aLoRA: 95 %
    assert not base.training


@pytest.mark.slow
def test_training_is_deterministic(tmp_path):
    """Two tiny runs of the real training script write byte-identical weights, whether or
    not the base's self-checks are logged along the way (a diagnostic must not train)."""
    digests, logs = [], []
    for run, every in (("a", "0"), ("b", "4")):  # steps 3 and 7 are copy steps
        logs.append(_train(tmp_path / run, "--set", "base_steps=9", f"self_check_every={every}"))
        digests.append([(tmp_path / run / p).read_bytes() for p in (
            "base/model.safetensors", "adapters/alora/adapter_model.safetensors",
            "adapters/lora/adapter_model.safetensors")])
    assert digests[0] == digests[1]
    checks = [re.findall(r"base after (\d+) steps self-check", log) for log in logs]
    assert checks == [[], ["4", "8"]]


@pytest.mark.slow
def test_bf16_training_is_deterministic_and_trains_other_weights(tmp_path):
    """bfloat16 training (the default, ``Config.bf16``): reproducible too (eager attention,
    no autocast weight cache), and really in bfloat16 (its weights differ from those of a
    ``--set bf16=0`` run)."""
    weights = []
    for run, bf16 in (("a", "1"), ("b", "1"), ("c", "0")):
        _train(tmp_path / run, "--set", f"bf16={bf16}")
        weights.append([(tmp_path / run / p).read_bytes() for p in (
            "base/model.safetensors", "adapters/alora/adapter_model.safetensors")])
    assert weights[0] == weights[1]
    assert weights[0][0] != weights[2][0] and weights[0][1] != weights[2][1]
    record = json.loads((tmp_path / "a" / "base" / "training.json").read_text())
    assert record["config"]["bf16"] is True


@pytest.mark.slow
def test_a_run_on_an_earlier_base_ships_that_base_with_the_whole_training_record(tmp_path):
    """``--base-from``: the adapters' base lands beside them, byte for byte, and training.json
    keeps the base's statistics and settings with this run's adapter settings."""
    _train(tmp_path / "a", "--kinds")
    _train(tmp_path / "b", "--base-from", str(tmp_path / "a" / "base"), "--kinds", "alora",
           "--set", "adapter_lr=0.001", "base_steps=99")
    first, split = (tmp_path / run / "base" for run in ("a", "b"))
    assert (split / "model.safetensors").read_bytes() == (first / "model.safetensors").read_bytes()
    earlier = json.loads((first / "training.json").read_text())
    record = json.loads((split / "training.json").read_text())
    assert record["base"] == {**earlier["base"], "loaded_from": str(first), "threads": 2}
    assert record["config"]["base_steps"] == 3 and record["config"]["adapter_lr"] == 0.001
    assert sorted(record["adapters"]) == ["alora"]
    assert (tmp_path / "b" / "adapters" / "alora" / "adapter_model.safetensors").exists()


@pytest.mark.slow
def test_each_adapter_trained_alone_on_a_saved_base_equals_the_end_to_end_runs(tmp_path):
    """Stages can run as separate processes (``--base-from``, ``--kinds``) and still give
    the bytes one whole run gives: each adapter has its own seeds, so training the LoRA
    without the aLoRA before it changes nothing, and a base reloaded from safetensors is the
    base that was saved."""
    _train(tmp_path / "whole")
    for kind in ("alora", "lora"):
        _train(tmp_path / kind, "--base-from", str(tmp_path / "whole" / "base"), "--kinds", kind)
        alone, whole = (tmp_path / run / "adapters" / kind / "adapter_model.safetensors"
                        for run in (kind, "whole"))
        assert alone.read_bytes() == whole.read_bytes(), kind


@pytest.mark.slow
def test_refining_a_loaded_base_equals_refining_it_in_the_run_that_trained_it(tmp_path):
    """``refine_steps``: the stage gives the same bytes after ``--base-from`` as at the end of
    an end-to-end run, is recorded, and a refined base is not refined twice."""
    refine = ["--set", "refine_steps=5", "refine_place_rate=0.5", "self_check_every=0"]
    _train(tmp_path / "whole", *refine)
    _train(tmp_path / "plain", "--kinds")
    _train(tmp_path / "split", "--base-from", str(tmp_path / "plain" / "base"), *refine)
    _train(tmp_path / "again", "--base-from", str(tmp_path / "split" / "base"), "--kinds",
           *refine)
    weights = {run: (tmp_path / run / "base" / "model.safetensors").read_bytes()
               for run in ("whole", "plain", "split", "again")}
    assert weights["whole"] == weights["split"] == weights["again"] != weights["plain"]
    assert ((tmp_path / "whole" / "adapters" / "alora" / "adapter_model.safetensors").read_bytes()
            == (tmp_path / "split" / "adapters" / "alora" / "adapter_model.safetensors"
                ).read_bytes())
    for run in ("whole", "split", "again"):
        record = json.loads((tmp_path / run / "base" / "training.json").read_text())
        assert record["config"]["refine_steps"] == 5
        assert record["base"]["refine"]["steps"] == 5


def test_adopting_an_earlier_base_copies_it_and_keeps_its_record(
        tiny_model_dir, train_script, tmp_path):
    """The merge behind ``--base-from``, on a real saved model: the base's bytes, its
    statistics and its settings survive; ``adapter_*`` settings are the new run's."""
    source = tmp_path / "earlier"
    shutil.copytree(tiny_model_dir, source)
    (source / "training.json").write_text(json.dumps({
        "config": {"base_steps": 7000, "adapter_lr": 0.5, "threads": 1},
        "base": {"seconds": 12.5, "steps": 7000}}))
    target = tmp_path / "shipped"
    target.mkdir()
    (target / "stale.bin").write_bytes(b"from another base")
    config, stats = train_script.adopt_base(
        source, target, {"base_steps": 3, "adapter_lr": 0.002, "threads": 2})
    assert config == {"base_steps": 7000, "adapter_lr": 0.002, "threads": 2}
    assert stats == {"seconds": 12.5, "steps": 7000, "loaded_from": str(source), "threads": 1}
    assert sorted(p.name for p in target.iterdir()) == sorted(
        p.name for p in tiny_model_dir.iterdir())
    assert ((target / "model.safetensors").read_bytes()
            == (tiny_model_dir / "model.safetensors").read_bytes())
    # a base with no record (trained elsewhere) is adopted with what is known: its source
    assert train_script.adopt_base(tiny_model_dir, tmp_path / "bare", {"threads": 2}) == (
        {"threads": 2}, {"loaded_from": str(tiny_model_dir)})
