"""The look-up probe (scripts/probe_lookup.py) reads the states it claims to read."""

from __future__ import annotations

import random

import torch

from mellea_local.embedded import synthetic as S


def test_word_states_are_the_base_states_at_the_last_token_of_the_requirement_word(
        tiny_model, tiny_tokenizer, probe_script):
    examples = S.check_examples(random.Random(0), 3, families=("mentions",))
    states = probe_script.word_states(tiny_model, tiny_tokenizer, examples)
    assert states.shape == (3, 3, 64)  # embeddings + 2 layers, 3 examples, hidden 64
    for i, ex in enumerate(examples):  # layer 0 is the embedding of the word's last token
        word_ids = tiny_tokenizer.encode(" " + ex.slots["word"], add_special_tokens=False)
        embedded = tiny_model.get_input_embeddings().weight[word_ids[-1]]
        assert torch.equal(states[0, i], embedded)


def test_the_probe_scores_held_out_rows_and_finds_a_linear_signal(probe_script):
    fit, score = probe_script.FIT, probe_script.SCORE
    torch.manual_seed(1)
    x = torch.randn(fit + score, 16)
    y = (x[:, 3] > 0).float()
    right = probe_script.probe_accuracy(x, y)
    assert right.shape == (score,) and right.float().mean() > 0.95
    shuffled = probe_script.probe_accuracy(x, y[torch.randperm(len(y))])
    assert 0.35 < shuffled.float().mean() < 0.65
