"""Adapter accuracy per family on a real tiny model with real (random) adapters.

Labels are built from the adapters' own verdicts (agree, disagree, half and half), so the
expected accuracy of each family is known exactly, whatever the random weights decide.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from mellea_local.bench.accuracy import (
    DatasetError,
    LabelledItem,
    check_adapters,
    context_of,
    evaluate_accuracy,
    family_order,
    read_dataset,
    synthetic_items,
)
from mellea_local.embedded.synthetic import FAMILIES
from mellea_local.intrinsics.requirement_check import check_outputs
from mellea_local.requirements.metrics import binary_scores
from mellea_local.requirements.requirement import requirement_check_to_bool


def _verdicts(backend, adapter, messages, requirements) -> list[bool]:
    raws = asyncio.run(check_outputs(backend, context_of(messages), requirements,
                                     adapter=adapter))
    return [requirement_check_to_bool(r) for r in raws]


def _line(messages, requirements, labels, family=None) -> str:
    obj = {"messages": messages, "requirements": requirements, "label": labels}
    if family is not None:
        obj["family"] = family
    return json.dumps(obj)


def test_accuracy_per_family_is_exact(bench_backend, tmp_path):
    backend = bench_backend
    alora, lora = check_adapters(backend)
    assert (alora.is_alora, lora.is_alora) == (True, False)
    base = synthetic_items(seed=3, n_per_family=1)  # six one-check conversations
    convs = [[{"role": m["role"], "content": m["content"]} for m in item.messages]
             for item in base]
    lines = []
    expected_lora: dict[str, list[bool]] = {"agree": [], "disagree": [], "half": []}
    said: list[bool] = []  # the aLoRA's verdicts, in order
    plan = ["agree", "agree", "disagree", "disagree", "half", "half"]
    for i, (messages, item, family) in enumerate(zip(convs, base, plan, strict=True)):
        [verdict] = _verdicts(backend, alora, messages, item.requirements)
        said.append(verdict)
        agree = family == "agree" or (family == "half" and i % 2 == 0)
        label = verdict if agree else not verdict
        lines.append(_line(messages, item.requirements, label, family))
        [lora_verdict] = _verdicts(backend, lora, messages, item.requirements)
        expected_lora[family].append(lora_verdict == label)
    # One conversation with two checks in one batch, a family for each.
    messages, reqs = convs[0], ["The response mentions paris.", "The response is valid JSON."]
    v = _verdicts(backend, alora, messages, reqs)
    said += v
    labels = [v[0], not v[1]]
    lines.append(_line(messages, reqs, labels, ["agree", "disagree"]))
    lv = _verdicts(backend, lora, messages, reqs)
    expected_lora["agree"].append(lv[0] == labels[0])
    expected_lora["disagree"].append(lv[1] == labels[1])
    data = tmp_path / "labelled.jsonl"
    data.write_text("\n".join(lines) + "\n\n")  # a blank line is allowed

    acc = evaluate_accuracy(backend, read_dataset(data))

    assert acc["examples"] == 8
    assert acc["families"] == ["agree", "disagree", "half"]
    assert list(acc["adapters"]) == [alora.name, lora.name]
    a = acc["adapters"][alora.name]
    assert a["kind"] == "alora"
    assert {f: _core(c) for f, c in a["families"].items()} == {
        "agree": {"n": 3, "correct": 3, "accuracy": 1.0},
        "disagree": {"n": 3, "correct": 0, "accuracy": 0.0},
        "half": {"n": 2, "correct": 1, "accuracy": 0.5},
    }
    assert _core(a["overall"]) == {"n": 8, "correct": 4, "accuracy": 0.5}
    assert a["mean_family_accuracy"] == pytest.approx(0.5)
    # Every cell carries the field's figures, from the one owner of those rules.
    labels = [lab for line in lines for lab in _labels(line)]
    verdicts = said
    for family in ("agree", "disagree"):
        picked = [(y, p) for y, p, f in zip(labels, verdicts,
                                             [f for line in lines for f in _fams(line)],
                                             strict=True) if f == family]
        want = binary_scores([y for y, _ in picked], [p for _, p in picked])
        cell = a["families"][family]
        assert cell["balanced_accuracy"] == want.balanced_accuracy
        assert cell["interval"] == (list(want.interval) if want.interval else None)
        assert (cell["yes_f1"], cell["no_f1"], cell["too_small"]) == (
            want.yes_f1, want.no_f1, True)
    assert a["overall"]["said_yes"] == pytest.approx(sum(said) / 8)
    floors = acc["floors"]
    assert floors["always yes"]["overall"]["said_yes"] == 1.0
    assert floors["always no"]["overall"]["yes_f1"] == 0.0
    for row in floors.values():
        cell = row["overall"]
        assert cell["balanced_accuracy"] in (0.5, None)  # None: one label only
    true = sum(labels)
    assert floors["always yes"]["overall"]["accuracy"] == true / 8
    b = acc["adapters"][lora.name]
    assert b["kind"] == "lora"
    for family, rights in expected_lora.items():
        assert _core(b["families"][family]) == {"n": len(rights), "correct": sum(rights),
                                                "accuracy": sum(rights) / len(rights)}
    assert b["overall"]["correct"] == sum(sum(r) for r in expected_lora.values())
    assert a["ms_per_check"] > 0


def _core(cell: dict) -> dict:
    return {k: cell[k] for k in ("n", "correct", "accuracy")}


def _labels(line: str) -> list[bool]:
    obj = json.loads(line)
    return obj["label"] if isinstance(obj["label"], list) else [obj["label"]]


def _fams(line: str) -> list[str]:
    obj = json.loads(line)
    n = len(obj["requirements"])
    return obj["family"] if isinstance(obj["family"], list) else [obj["family"]] * n


def test_one_adapter_can_be_chosen(bench_backend):
    items = synthetic_items(seed=4, n_per_family=1)[:2]
    lora = bench_backend.adapters["rc_lora"]
    acc = evaluate_accuracy(bench_backend, items, adapters=[lora])
    assert list(acc["adapters"]) == ["rc_lora"]
    assert acc["adapters"]["rc_lora"]["overall"]["n"] == 2


def test_a_backend_without_check_adapters_is_refused(tiny_model, tiny_tokenizer):
    from mellea_local.backends.huggingface import LocalHFBackend

    backend = LocalHFBackend.from_loaded(tiny_model, tiny_tokenizer, model_id="bare")
    with pytest.raises(ValueError, match="no requirement-check adapter"):
        evaluate_accuracy(backend, synthetic_items(seed=1, n_per_family=1))


def test_synthetic_set_is_balanced_and_seeded():
    items = synthetic_items(seed=9000, n_per_family=4)
    assert len(items) == 4 * len(FAMILIES)
    assert Counter(i.families[0] for i in items) == dict.fromkeys(FAMILIES, 4)
    assert sum(i.labels[0] for i in items) == 2 * len(FAMILIES)
    again = synthetic_items(seed=9000, n_per_family=4)
    assert [i.requirements for i in again] == [i.requirements for i in items]
    assert family_order(items) == list(FAMILIES)


def test_lines_without_family_group_by_requirement(tmp_path):
    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "HELLO"}]
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join([
        _line(conv, ["Be short.", "Shout."], [True, True]),
        _line(conv, ["Shout."], False, "caps"),
    ]) + "\n")
    items = read_dataset(data)
    assert [i.families for i in items] == [["Be short.", "Shout."], ["caps"]]
    assert items[1].labels == [False]
    assert family_order(items) == ["Be short.", "Shout.", "caps"]
    assert isinstance(items[0], LabelledItem) and items[0].messages == conv


@pytest.mark.parametrize(("text", "words"), [
    ('{"messages": [{"role": "assistant", "content": "x"}], "requirement": "a"}',
     'line 2: no "label"'),
    ('{"messages": [{"role": "assistant", "content": "x"}], "requirement": "a", '
     '"label": true, "family": ["f", "g"]}', '"family" must be'),
    ("{nope", "line 2: not valid JSON"),
])
def test_bad_lines_name_file_and_line(tmp_path, text, words):
    good = _line([{"role": "assistant", "content": "x"}], ["a"], True)
    data = tmp_path / "d.jsonl"
    data.write_text(good + "\n" + text + "\n")
    with pytest.raises(DatasetError, match=words) as info:
        read_dataset(data)
    assert str(data) in str(info.value)


def test_missing_and_empty_datasets_are_refused(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        read_dataset(tmp_path / "absent.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DatasetError, match="holds no lines"):
        read_dataset(tmp_path / "empty.jsonl")


def test_the_route_row_is_the_adapter_with_programs_deciding_what_they_can(bench_backend):
    """``route=True`` adds ``<adapter>+route``: the adapter's verdicts, replaced by the program's
    exact verdict wherever a requirement maps (what validate/check decide by default)."""
    from mellea_local.bench.accuracy import LabelledItem, routed_verdicts
    from mellea_local.requirements.verify import route, verify

    pytest.importorskip("langdetect")
    items = synthetic_items(seed=4, n_per_family=2)
    items.append(LabelledItem(
        messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
        requirements=["End with a question.", "The reply is friendly."], labels=[False, True],
        families=["question", "tone"]))
    alora = bench_backend.adapters["rc_alora"]
    plain = evaluate_accuracy(bench_backend, items, adapters=[alora])
    acc = evaluate_accuracy(bench_backend, items, adapters=[alora], route=True)
    assert list(acc["adapters"]) == ["rc_alora", "rc_alora+route"]
    assert acc["adapters"]["rc_alora"]["overall"] == plain["adapters"]["rc_alora"]["overall"]
    row = acc["adapters"]["rc_alora+route"]
    assert row["kind"] == "alora+route"
    progs, names = routed_verdicts(items)
    routed = [(p, y) for got, item in zip(progs, items, strict=True)
              for p, y in zip(got, item.labels, strict=True) if p is not None]
    assert row["routed"]["checks"] == len(routed) == len(names) >= 1
    assert row["routed"]["of"] == sum(len(i.labels) for i in items)
    # Each routed verdict is the program's own, run directly.
    assert progs[-1][0] is verify(route("End with a question."), "Hello!") is False
    assert progs[-1][1] is None  # semantic: the adapter decides
