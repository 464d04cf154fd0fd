"""The synthetic data the embedded model and its adapters learn from: its ground truth.

The labels are computed by plain Python predicates; these tests pin those predicates, the
balance of every family, the held-out vocabulary and the shapes of the ReACT traces, so a
change to the data generator cannot silently change what the shipped model was taught.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import replace

import pytest
import torch
from embedded_lab import synthetic as S

from mellea_local.embedded import build_tokenizer
from mellea_local.embedded.corpus import corpus_lines


def test_predicates_are_the_plain_python_truth():
    assert S.is_all_caps("HELLO, WORLD 42!") and not S.is_all_caps("HELLO World")
    assert not S.is_all_caps("123")
    assert S.mentions("We met in PARIS.", "Paris") and not S.mentions("a parish", "paris")
    assert S.word_count('{"a": 1}') == 2
    assert S.has_number("route 66") and not S.has_number("sixty six")
    assert S.ends_with_question_mark("Why? Because.") is False
    assert S.is_valid_json('{"a": [1, 2]}') and S.is_valid_json("42")
    assert not S.is_valid_json("NaN") and not S.is_valid_json("{'a': 1}")


def _assert_balanced_and_labelled(examples, n_per_family: int) -> None:
    for family in S.FAMILIES:
        mine = [e for e in examples if e.family == family]
        assert len(mine) == n_per_family and sum(e.label for e in mine) == n_per_family // 2
        for e in mine:
            assert S.PREDICATES[family](e.response, e.slots) == e.label
            assert e.requirement == S.requirement_for(family, **e.slots)


@pytest.mark.parametrize("vocab", ["train", "unseen"])
def test_check_examples_are_balanced_and_labelled_by_the_predicates(vocab):
    examples = S.check_examples(random.Random(7), 40, vocab=vocab)
    _assert_balanced_and_labelled(examples, 40)
    if vocab == "unseen":
        assert all(S.has_unseen_word(e.response) for e in examples)


def test_chat_checks_are_balanced_and_ask_about_words_of_the_question_too():
    """Checks on chat answers: the predicate's label, and "mentions" near misses."""
    examples = S.chat_check_examples(random.Random(7), 40)
    _assert_balanced_and_labelled(examples, 40)
    near = sum(S.mentions(e.messages[-2]["content"], e.slots["word"])
               for e in examples if e.family == "mentions" and not e.label)
    assert near >= 5  # the question says the word, the answer does not


def test_unseen_words_never_occur_in_the_tokenizer_corpus_or_training_words():
    corpus = set(re.findall(r"[a-z]+", " ".join(corpus_lines()).lower()))
    assert not set(S.UNSEEN_WORDS) & corpus
    assert not set(S.UNSEEN_WORDS) & set(S.VOCAB)
    assert all(S.pseudo_word(random.Random(i)) not in S.UNSEEN_WORDS for i in range(200))


def test_react_traces_use_the_real_tools_and_answers():
    rng = random.Random(3)
    for _ in range(10):
        task = S.react_task(rng)
        trace = S.react_trace(rng, task)
        assert [m["role"] for m in trace.messages] == [
            "user", "assistant", "tool", "user", "assistant"]
        assert trace.messages[2]["content"] == task.answer
        final = trace.messages[-1]["tool_calls"][0]["function"]
        assert final == {"name": "final_answer", "arguments": {"answer": task.answer}}
        assert [t["function"]["name"] for t in trace.tools] == [*task.offered, "final_answer"]


def test_made_up_lookup_words_are_never_held_out_words():
    """Training keys/values with made-up words teach copying of any word; none may be a word
    the unseen-key evaluation holds out."""
    rng = random.Random(4)
    made_up = set()
    for _ in range(200):
        task = S.react_task(rng, kind="lookup", pseudo_rate=1.0)
        for text in (*task.table, *task.table.values()):
            made_up |= {w for w in re.findall(r"[a-z]+", text.lower())
                        if w not in S.VOCAB and w.capitalize() not in S.PLACES}
    assert len(made_up) > 50
    assert not made_up & set(S.UNSEEN_WORDS)


@pytest.mark.parametrize("questions", [1, 3])
def test_self_checks_ask_about_the_answer_and_answer_with_its_truth(questions):
    rng = random.Random(11)
    seen = set()
    for _ in range(60):
        example = S.self_check_example(rng, questions)
        assert example.learned_turns == questions
        conversation = example.messages[:-2 * questions]
        answer = conversation[-1]["content"]
        asked = []
        for question, verdict in zip(example.messages[-2 * questions::2],
                                     example.messages[-2 * questions + 1::2], strict=True):
            assert question["role"] == "user" and verdict["content"] in {"Yes.", "No."}
            family = next(f for f, qs in S.SELF_CHECK_QUESTIONS.items()
                          if any(re.fullmatch(re.sub(r"\\{\w+\\}", ".+", re.escape(q)),
                                              question["content"]) for q in qs))
            asked.append(family)
            # The phrasings differ from the requirement texts: the adapters learn those.
            assert question["content"] not in S.PHRASINGS.values()
            slots = {}
            if family == "mentions":
                slots["word"] = re.search(r"(say|word) (.+)\?$", question["content"]).group(2)
            if family == "max_words":
                slots["n"] = int(re.search(r"\d+", question["content"]).group())
            assert S.PREDICATES[family](answer, slots) == (verdict["content"] == "Yes.")
        assert len(set(asked)) == questions  # one question per family
        seen.update(asked)
    assert seen == set(S.FAMILIES)


def test_adapter_rows_feed_the_adapter_what_inference_feeds_it(
        tiny_model, tiny_tokenizer, train_script):
    """The aLoRA takes the conversation from the base; a LoRA runs over the whole prompt, as
    at inference (a LoRA trained aLoRA-style scored chance once loaded: a real bug, once)."""
    from mellea_local.backends.huggingface import LocalHFBackend

    backend = LocalHFBackend.from_loaded(tiny_model, tiny_tokenizer, model_id="tiny")
    examples = S.check_examples(random.Random(2), 1)
    for alora in (True, False):
        record = train_script.adapter_record(tiny_tokenizer, "alora" if alora else "lora")
        rows = train_script.check_rows(backend, record, examples)
        for row, ex in zip(rows, examples, strict=True):
            invocation = tiny_tokenizer.encode("<requirements>", add_special_tokens=False)
            if alora:
                assert row.ids[row.shared: row.shared + len(invocation)] == invocation
            else:
                assert row.shared == 0
            assert row.label == ex.label
            answer = tiny_tokenizer.decode(row.ids[-3:])
            assert answer == ('yes"}' if ex.label else 'no"}') + tiny_tokenizer.eos_token


@pytest.mark.parametrize("questions", [1, 3])
def test_training_learns_only_the_answers_to_the_self_check_questions(questions, train_script):
    tok = build_tokenizer()
    example = S.self_check_example(random.Random(5), questions)
    ids, labels = train_script.encode_chat(tok, example)
    learned = tok.decode([t for t in labels if t != -100])
    verdicts = [m["content"] for m in example.messages[-2 * questions + 1::2]]
    assert learned == "".join(v + tok.eos_token for v in verdicts)
    assert len(ids) == len(labels)


def test_shared_prefix_batches_give_the_loss_and_gradients_of_whole_rows(tiny_model, train_script):
    """ReACT traces with the same tools run their tool prompt once per batch; that must be the
    same step as running every trace whole."""
    tok = build_tokenizer()
    rng = random.Random(3)
    tasks = [S.react_task(rng, kind="lookup") for _ in range(12)]
    traces = [S.react_trace(rng, t) for t in tasks if t.offered == ("lookup",)][:3]
    assert len(traces) >= 2
    rows = [train_script.encode_chat(tok, t) for t in traces]
    shared = train_script.shared_prefix(rows)
    assert shared > 100  # the tool prompt
    assert all(lab == -100 for _, labels in rows for lab in labels[: shared + 1])

    def step(n: int) -> tuple[float, list[torch.Tensor]]:
        tiny_model.zero_grad(set_to_none=True)
        loss = train_script.lm_loss(tiny_model, rows, tok.pad_token_id, n)
        loss.backward()
        grads = [p.grad.clone() for p in tiny_model.parameters() if p.grad is not None]
        tiny_model.zero_grad(set_to_none=True)
        return loss.item(), grads

    whole, whole_grads = step(0)
    once, once_grads = step(shared)
    assert once == pytest.approx(whole, rel=1e-5)
    assert len(once_grads) == len(whole_grads)
    for a, b in zip(once_grads, whole_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_prefix_batches_keep_every_row_once_and_share_only_within_a_tool_set(train_script):
    rows = [([1, 2, 3, 4, 5, 6], [-100, -100, -100, -100, 6, 6]),
            ([1, 2, 3, 9, 9], [-100, -100, -100, -100, 9]),
            ([7, 8], [-100, 8]),
            ([1, 2, 3, 4, 5], [-100, -100, 4, 5, 5])]
    groups = ["a", "a", None, "a"]
    batches = train_script.prefix_batches(rows, groups, budget=100, rng=random.Random(0))
    assert sorted(i for batch, _ in batches for i in batch) == [0, 1, 2, 3]
    shared = {tuple(sorted(batch)): n for batch, n in batches}
    assert shared[(2,)] == 0
    # rows 0, 1, 3 share [1, 2, 3]; row 3 learns its third token, so only 1 token is shared
    assert shared[(0, 1, 3)] == 1


def test_the_base_optimizer_scales_only_the_shared_embedding_parts(
        tiny_model, tiny_tokenizer, train_script):
    """factor_lr_scale reaches the word and form parts only; plain runs keep one group at the
    schedule's rate (the shipped recipe's steps are unchanged)."""
    import copy

    from mellea_local.embedded.factored_embedding import factor_embeddings

    cfg = train_script.Config(factor_lr_scale=0.25)
    plain = train_script.base_optimizer(tiny_model, cfg)
    train_script.set_lr(plain, 1e-3)
    [group] = plain.param_groups
    assert group["lr"] == 1e-3 and len(group["params"]) == len(list(tiny_model.parameters()))
    model = copy.deepcopy(tiny_model)
    factored = factor_embeddings(model, tiny_tokenizer)
    opt = train_script.base_optimizer(model, cfg, factored)
    train_script.set_lr(opt, 1e-3)
    rest, shared = opt.param_groups
    assert (rest["lr"], shared["lr"]) == (1e-3, 0.25e-3)
    assert shared["params"] == [factored.word, factored.form]
    everything = rest["params"] + shared["params"]
    assert len({id(p) for p in everything}) == len(everything) == len(list(model.parameters()))


def test_configs_whose_probe_reads_a_missing_layer_are_refused_before_training(train_script):
    check, config = train_script.check_config, train_script.Config
    check(config())
    check(config(**train_script.QUICK))  # the --quick model has 2 layers
    with pytest.raises(ValueError, match=r"feature_layer=4 .* 2-layer model .* --set"):
        check(config(num_layers=2))
    check(config(num_layers=2, feature_weight=0.0, adapter_first_layer=1))  # no probe
    with pytest.raises(ValueError, match=r"adapter_first_layer=3 leaves no layer .* 2-layer"):
        check(config(num_layers=2, feature_layer=1))


def test_a_mentions_weight_adds_mentions_checks_and_keeps_the_even_mix(train_script):
    config = train_script.Config(adapter_steps=30, adapter_batch=8)
    even = train_script.adapter_examples(config)
    assert Counter(e.family for e in even) == dict.fromkeys(S.FAMILIES, 41)
    weighted = train_script.adapter_examples(replace(config, adapter_mentions_weight=2.0))
    assert [(e.requirement, e.messages) for e in weighted[:len(even)]] == [
        (e.requirement, e.messages) for e in even]  # the even mix is drawn as before
    counts = Counter(e.family for e in weighted)
    assert counts == {**dict.fromkeys(S.FAMILIES, 41), "mentions": 82}
    extra = weighted[len(even):]
    assert abs(sum(e.label for e in extra) - len(extra) / 2) <= 1  # balanced, labels true
    assert all(S.mentions(e.response, e.slots["word"]) == e.label for e in extra)
