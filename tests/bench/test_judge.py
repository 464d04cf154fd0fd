"""The base model as judge, on a real tiny model with real adapters loaded beside it.

The random model's answers are noise, so nothing here asserts an accuracy; it asserts where
each verdict comes from: the greedy variant is the peer's reader applied to the model's own
reply, the probability variant reads the base model's logits after the same prompt (no adapter
on), and the rows, the points against the judge and the report are tallied from those verdicts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from mellea_local.bench import suite
from mellea_local.bench.accuracy import context_of, evaluate_accuracy, synthetic_items
from mellea_local.bench.judge import (
    add_judge,
    ajudge_items,
    answer_tokens,
    base_next_logits,
    judge_name,
    judge_rows,
)
from mellea_local.bench.report import accuracy_targets, markdown
from mellea_local.bench.suite import SuiteConfig
from mellea_local.cli.bench_cmd import command_line
from mellea_local.errors import BenchConfigError, BenchmarkError
from mellea_local.messages import Message
from mellea_local.requirements.requirement import LLMaJRequirement
from mellea_local.requirements.result import default_output_to_bool


def test_answer_tokens_are_the_single_token_spellings(tiny_tokenizer):
    yes, no = answer_tokens(tiny_tokenizer)
    assert yes and no and not set(yes) & set(no)
    for ids, word in ((yes, "yes"), (no, "no")):
        for i in ids:
            assert tiny_tokenizer.decode([i]).strip().lower() == word
    # "Yes" is two tokens in this vocabulary: its first piece is no answer, so it is left out.
    assert len(tiny_tokenizer.encode("Yes", add_special_tokens=False)) == 2
    assert tiny_tokenizer.encode("Yes", add_special_tokens=False)[0] not in yes


def test_a_tokenizer_without_yes_or_no_tokens_is_refused(tiny_tokenizer):
    class Spelling:
        def encode(self, text, add_special_tokens=False):
            return list(text.encode())  # one id per byte: no answer is a single token

    with pytest.raises(BenchmarkError, match="neither 'yes' nor 'no'"):
        answer_tokens(Spelling())


def test_the_probability_judge_needs_a_local_model():
    from mellea_local.bench.judge import ajudge

    with pytest.raises(BenchConfigError, match="local transformers backend"):
        asyncio.run(ajudge(object(), [{"role": "assistant", "content": "x"}], "r"))


def test_verdicts_come_from_the_base_model(bench_backend, tiny_tokenizer):
    from mellea_local.embedded import build_model

    items = synthetic_items(seed=4, n_per_family=1)[:3]
    verdicts, seconds = asyncio.run(ajudge_items(bench_backend, items, max_new_tokens=6))
    assert seconds > 0 and [len(v) for v in verdicts] == [1, 1, 1]
    bare = build_model(tiny_tokenizer, seed=5)  # the adapters' base, never touched by PEFT
    for item, [v] in zip(items, verdicts, strict=True):
        assert v.greedy == default_output_to_bool(v.text)  # the peer's reader on the reply
        assert v.probability == (v.p_yes > v.p_no)
        assert 0 <= v.p_yes + v.p_no <= 1
        # Greedy decoding's first token is the argmax the probability variant read: the two
        # variants saw the same rendered prompt.
        assert v.text.startswith(tiny_tokenizer.decode([v.top_token], skip_special_tokens=True))
        # And those logits are the bare base model's: no adapter was on.
        question = Message("user", LLMaJRequirement(item.requirements[0]).judge_prompt(
            item.messages[-1]["content"]))
        ids, _, _ = bench_backend.render(question, context_of(item.messages))
        with torch.inference_mode():
            want = bare(input_ids=torch.tensor([ids])).logits[0, -1]
        assert torch.allclose(base_next_logits(bench_backend, ids), want, atol=1e-5)
    bench_backend.engine.holder.assert_base()


def test_judge_rows_and_points_are_tallied_from_the_verdicts(bench_backend):
    items = synthetic_items(seed=6, n_per_family=2)  # one met, one unmet a family
    acc = evaluate_accuracy(bench_backend, items)
    verdicts, _ = asyncio.run(ajudge_items(bench_backend, items, max_new_tokens=4))
    rows = judge_rows(items, acc["families"], verdicts, 1.0, max_new_tokens=4)
    assert list(rows) == [judge_name("greedy"), judge_name("probability")]
    for variant, row in zip(("greedy", "probability"), rows.values(), strict=True):
        picked = [getattr(v, variant) for [v] in verdicts]
        right = sum(p == item.labels[0] for p, item in zip(picked, items, strict=True))
        assert row["kind"] == "judge" and row["variant"] == variant
        assert {k: row["overall"][k] for k in ("n", "correct", "accuracy")} == {
            "n": len(items), "correct": right, "accuracy": right / len(items)}
        assert row["said_yes"] == sum(picked) / len(items)
    mass = sum(v.p_yes + v.p_no for [v] in verdicts) / len(items)
    assert rows[judge_name("probability")]["mean_answer_mass"] == pytest.approx(mass)

    add_judge(bench_backend, items, acc, max_new_tokens=4)  # greedy: same verdicts again
    assert acc["adapters"][judge_name("greedy")]["overall"] == rows[judge_name("greedy")][
        "overall"]
    assert list(acc["vs_judge"]) == ["rc_alora", "rc_lora"]
    for name, variants in acc["vs_judge"].items():
        for variant, diff in variants.items():
            judge = acc["adapters"][judge_name(variant)]
            assert diff["overall"] == pytest.approx(100 * (
                acc["adapters"][name]["overall"]["balanced_accuracy"]
                - judge["overall"]["balanced_accuracy"]))
            for family in acc["families"]:
                assert diff["families"][family] == pytest.approx(100 * (
                    acc["adapters"][name]["families"][family]["balanced_accuracy"]
                    - judge["families"][family]["balanced_accuracy"]))

    acc.update(source="unit", what="unit checks")
    section = {"model": "tiny-bench", "adapters": {}, "missing": {}, "splits": {"unit": acc}}
    results = {"name": "j", "seconds": 1.0, "accuracy": section,
               "config": {"command": "mellea-local bench --only accuracy", "quick": False,
                          "speed_model": "-", "params": 0, "device": "cpu", "dtype": "float32"},
               "environment": {"machine": "box", "torch": "2", "torch_threads": 1}}
    report = markdown(results, {})
    true = sum(item.labels[0] for item in items)
    assert acc["labels_true"] == true
    assert f"{true} of the {len(items)} labels are true: always-yes scores " \
        f"{true / len(items):.3f}" in report
    assert "| family | checks (met) | rc_alora (alora) | rc_lora (lora) | judge (greedy) | " \
        "judge (probability) |" in report
    assert "| always yes | 0.500 [0.50, 0.50]† |" in report
    assert "| rc_alora - judge (greedy) | rc_alora - judge (probability) |" in report
    assert "**too few (n=12)**" in report  # twelve checks: no lead is claimed
    rows = accuracy_targets(section)
    assert [r["ratio"] for r in rows] == ["aLoRA balanced accuracy", "aLoRA - best judge, points"]
    assert rows[1]["value"] == min(v["overall"] for v in acc["vs_judge"]["rc_alora"].values())
    assert all(r["met"] is None and "too few checks" in r["target"] for r in rows)


def test_only_limit_and_the_splits(tmp_path):
    from mellea_local.bench.splits import accuracy_splits

    cfg = SuiteConfig(only=("accuracy",))
    assert set(cfg.skipped) == set(suite.SECTIONS) - {"accuracy"}
    for bad, words in ((SuiteConfig(only=("speed",)), "--only speed: no such section"),
                       (SuiteConfig(limit=0, dataset=tmp_path), "--limit must be at least 1"),
                       (SuiteConfig(limit=5), "--limit takes the first lines of a --dataset"),
                       (SuiteConfig(model="smollm2-135m", splits=("nope",)),
                        "--split nope: no such split"),
                       (SuiteConfig(model="smollm2-135m", splits=("user-style",),
                                    dataset=tmp_path / "x.jsonl"), "not both")):
        bad.out_dir = tmp_path / "out"
        with pytest.raises(BenchConfigError, match=words):
            suite.run_suite(bad)
        assert not bad.out_dir.exists()

    def locate(name: str) -> Path:
        return tmp_path / name

    # Nothing shipped: every default split is a one-line note naming its file.
    found, missing = accuracy_splits("smollm2-135m", None, locate=locate)
    assert found == [] and list(missing) == ["held-out", "held-out-families", "user-style",
                                                  "user-style-2"]
    assert str(tmp_path / "SmolLM2-135M-Instruct.families.jsonl") in missing[
        "held-out-families"]
    for name in ("SmolLM2-135M-Instruct.jsonl", "user-style.jsonl"):
        (tmp_path / name).write_text("{}\n")
    found, missing = accuracy_splits("smollm2-135m", None, locate=locate)
    assert [(s.name, s.path.name) for s in found] == [
        ("held-out", "SmolLM2-135M-Instruct.jsonl"), ("user-style", "user-style.jsonl")]
    assert list(missing) == ["held-out-families", "user-style-2"]
    # --split picks, in the order asked; an absent one asked for is an error naming its file.
    found, _ = accuracy_splits("smollm2-135m", None, ("user-style", "held-out"), locate=locate)
    assert [s.name for s in found] == ["user-style", "held-out"]
    with pytest.raises(BenchConfigError, match=r"SmolLM2-135M-Instruct\.families\.jsonl"):
        accuracy_splits("smollm2-135m", None, ("held-out-families",), locate=locate)
    # --dataset is a split of its own; the embedded model without --split: the synthetic set.
    found, _ = accuracy_splits("smollm2-135m", Path("mine.jsonl"))
    assert [(s.name, s.path) for s in found] == [("mine", Path("mine.jsonl"))]
    assert accuracy_splits(None, None) == ([], {})
    found, _ = accuracy_splits("embedded", None, ("user-style",), locate=locate)
    assert [s.name for s in found] == ["user-style"]


def test_the_recorded_command_names_the_accuracy_options():
    line = command_line({"model": "smollm2-135m", "only": ["accuracy"], "limit": 140,
                         "judge": True, "seed": 9000})
    assert line == "mellea-local bench --model smollm2-135m --only accuracy --limit 140"
    assert command_line({"judge": False}) == "mellea-local bench --no-judge"


def test_a_model_without_held_adapters_scores_every_library_one(tiny_tokenizer, bench_library):
    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.embedded import build_model

    backend = LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=5), tiny_tokenizer,
                                         model_id="tiny-bench")
    assert suite.library_adapters(backend, roots=[bench_library / "absent"]) == []
    loaded = suite.library_adapters(backend, roots=[bench_library])
    assert [(a.name, a.kind.value) for a in loaded] == [
        ("requirement-check_alora", "alora"), ("requirement-check_lora", "lora")]
    assert sorted(backend.adapters) == ["requirement-check_alora", "requirement-check_lora"]
