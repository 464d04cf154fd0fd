"""The base-model judge baseline (``bench.judge``) on SmolLM2-135M-Instruct: the yes/no rules
on the real tokenizer's output, and verdicts read from the real model's answers."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.real_model

CASES = [  # (messages, requirement, label): the check format `bench --dataset` reads
    ([{"role": "user", "content": "Name a fruit. Answer in capital letters."},
      {"role": "assistant", "content": "BANANA"}], "The answer is in capital letters.", True),
    ([{"role": "user", "content": "Say hello in English."},
      {"role": "assistant", "content": "Bonjour! Merci."}],
     "The response must be written solely in English.", False),
    ([{"role": "user", "content": "Give a number."},
      {"role": "assistant", "content": "Seven is my favourite."}],
     "The response contains a digit.", False),
]


@pytest.fixture(scope="module")
def smollm():
    from mellea_local.backends.huggingface import LocalHFBackend

    return LocalHFBackend("smollm2-135m", device="cpu")


def test_answer_tokens_and_the_yes_no_reader_on_the_real_tokenizer(smollm):
    from mellea_local.bench.judge import answer_tokens
    from mellea_local.requirements.result import default_output_to_bool

    tok = smollm.tokenizer
    yes, no = answer_tokens(tok)
    assert {tok.decode([i]) for i in yes} == {"yes", " yes", "Yes", " Yes"}
    assert {tok.decode([i]) for i in no} == {"no", " no", "No", " No", "NO", " NO"}
    end = tok.convert_tokens_to_ids("<|im_end|>")
    # Replies as the model emits them (ids, then its end-of-turn token), decoded as a thunk is.
    for reply, verdict in (("Yes", True), ("yes.", True), ("No", False), ("NO", False),
                           ("No, it is not.", False), ("The answer is yes.", True),
                           ("Yesterday it rained.", False), ("Y", True)):
        ids = [*tok.encode(reply, add_special_tokens=False), end]
        text = tok.decode(ids, skip_special_tokens=True)
        assert text == reply
        assert default_output_to_bool(text) is verdict, reply
    # A reply's first token is what the probability variant reads.
    assert tok.encode("Yes", add_special_tokens=False)[0] in yes
    assert tok.encode("No", add_special_tokens=False)[0] in no


def test_the_judge_reads_smollm2s_own_answers(smollm):
    from mellea_local.bench.accuracy import LabelledItem
    from mellea_local.bench.judge import ajudge_items, judge_rows
    from mellea_local.requirements.result import default_output_to_bool

    items = [LabelledItem(m, [r], [label], ["f"]) for m, r, label in CASES]
    verdicts, _ = asyncio.run(ajudge_items(smollm, items, max_new_tokens=8))
    for [v] in verdicts:
        assert v.text  # the model wrote a reply, and the verdict is read from it
        assert v.greedy == default_output_to_bool(v.text)
        # greedy decoding took the argmax the probability variant read, after the same prompt
        assert v.text.lstrip().startswith(smollm.tokenizer.decode([v.top_token]).strip())
        assert 0 < v.p_yes + v.p_no < 1 and v.probability == (v.p_yes > v.p_no)
    rows = judge_rows(items, ["f"], verdicts, 1.0, max_new_tokens=8)
    assert [r["overall"]["n"] for r in rows.values()] == [3, 3]
    smollm.engine.holder.assert_base()
