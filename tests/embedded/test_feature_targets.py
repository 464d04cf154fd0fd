"""Dense feature targets for the base's probe: they must say what the check labels say."""

from __future__ import annotations

import random
import re

import pytest
import torch
from embedded_lab import synthetic as S
from embedded_lab.feature_targets import (
    CLASSES,
    DEPTH_CLASSES,
    FEATURES,
    IDENTITIES,
    IGNORE,
    ROLES,
    WORD_CLASSES,
    feature_targets,
    json_depth,
)

WORDS, NOT_CAPS, MENTIONED, DEPTH, ROLE, WORD = (
    FEATURES.index(f) for f in ("words", "not_caps", "mentioned", "depth", "role", "word"))
TURN = slice(0, ROLE)  # the targets about the latest answer


def _render(tok, messages):
    return tok.apply_chat_template(messages, tokenize=False)


def _token_at(tok, text: str, char: int) -> int:
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return next(i for i, (s, e) in enumerate(offsets) if s <= char < e)


def test_targets_follow_one_answer_and_the_question_after_it(tiny_tokenizer):
    text = _render(tiny_tokenizer, [
        {"role": "user", "content": "Tell me about the river."},
        {"role": "assistant", "content": "RIGHT TAKING BACK."},
        {"role": "user", "content": "Did you say back or river?"},
    ])
    ids, targets = feature_targets(tiny_tokenizer, text)
    assert ids == tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(targets) == len(ids)
    answer = text.index("RIGHT")
    before = _token_at(tiny_tokenizer, text, answer)
    assert all(t[TURN] == [IGNORE] * 4 for t in targets[:before])
    # " TAKING" is the answer's second word, still all capitals (targets on its last token)
    taking = targets[_token_at(tiny_tokenizer, text, text.index("TAKING") + 5)]
    assert taking[WORDS] == 2 and taking[NOT_CAPS] == 0 and taking[MENTIONED] == 0
    question = text.index("Did")
    back = targets[_token_at(tiny_tokenizer, text, text.index("back", question) + 3)]
    river = targets[_token_at(tiny_tokenizer, text, text.index("river", question) + 4)]
    assert back[TURN] == [3, 0, 1, 0]  # in the answer, whatever its case
    assert river[MENTIONED] == 0  # the user said it, the answer did not
    assert targets[-1][:2] == [3, 0]


def test_thinking_is_no_part_of_the_answer(tiny_tokenizer):
    text = _render(tiny_tokenizer, [
        {"role": "user", "content": "Hi?"},
        {"role": "assistant", "content": "HELLO THERE", "reasoning_content": "say hello"},
    ])
    _, targets = feature_targets(tiny_tokenizer, text)
    thought = _token_at(tiny_tokenizer, text, text.index("say hello"))
    assert targets[thought][TURN] == [IGNORE] * 4
    assert targets[thought][ROLE] == ROLES.index("assistant")
    assert targets[-1][:2] == [2, 0]


@pytest.mark.parametrize("family", ["all_caps", "mentions", "max_words", "json"])
def test_targets_at_the_check_prompt_equal_the_check_labels(tiny_tokenizer, family):
    """After the requirement turn the probe is asked exactly what the check's label answers."""
    rng = random.Random(11)
    for i in range(30):
        ex = S.check_example(rng, family, i % 2 == 0, pseudo_rate=0.15)
        text = _render(tiny_tokenizer, [*ex.messages, S.check_user_turn(ex.requirement)])
        _, targets = feature_targets(tiny_tokenizer, text)
        last = targets[-1]
        assert last[WORDS] == min(S.word_count(ex.response), WORD_CLASSES - 1)
        assert last[NOT_CAPS] == int(not S.is_all_caps(ex.response))
        assert last[DEPTH] == max(0, min(json_depth(ex.response), DEPTH_CLASSES - 1))
        if family == "mentions":
            word = ex.slots["word"]
            at = text.rindex(f"mentions {word}") + len("mentions ") + len(word) - 1
            assert targets[_token_at(tiny_tokenizer, text, at)][MENTIONED] == int(ex.label)


def test_every_token_knows_its_role_and_every_known_word_its_lowercase_identity(
        tiny_tokenizer):
    """Role and identity, the parts of the "mentioned" look-up, cover the whole text."""
    text = _render(tiny_tokenizer, [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Tell me about the river."},
        {"role": "assistant", "content": "The River runs. RIVER!"},
        {"role": "user", "content": "Did you say river or Paris or galaxy?"},
    ])
    _, targets = feature_targets(tiny_tokenizer, text)
    for role, content in (("system", "brief"), ("user", "Tell"), ("assistant", "runs")):
        assert targets[_token_at(tiny_tokenizer, text, text.index(content))][ROLE] == \
            ROLES.index(role)
    assert targets[0][ROLE] == ROLES.index("system")  # a header belongs to its turn
    spellings = [m.end() - 1 for m in re.finditer("(?i)river", text)]
    assert len({tuple(tiny_tokenizer.tokenize(text[m.start():m.end()]))
                for m in re.finditer("(?i) ?river", text)}) >= 3  # unrelated BPE spellings
    assert {targets[_token_at(tiny_tokenizer, text, at)][WORD] for at in spellings} == {
        IDENTITIES.index("river")}
    paris = text.index("Paris") + 4
    assert targets[_token_at(tiny_tokenizer, text, paris)][WORD] == IDENTITIES.index("paris")
    # a word held out of training has no identity, and a word's inner tokens none either
    unseen = text.index("galaxy")
    assert "galaxy" in S.UNSEEN_WORDS
    assert all(targets[i][WORD] == IGNORE for i in range(
        _token_at(tiny_tokenizer, text, unseen), _token_at(tiny_tokenizer, text, unseen + 5) + 1))
    assert set(IDENTITIES).isdisjoint(S.UNSEEN_WORDS)


def test_word_echo_lists_exactly_the_asked_words_the_answer_holds():
    rng = random.Random(4)
    for _ in range(50):
        messages = S.word_echo_example(rng).messages
        answer, asked, reply = (m["content"] for m in messages[-3:])
        words = asked.removeprefix("Which of these words did you say: ").rstrip("?").split(", ")
        said = [w.lower() for w in words if S.mentions(answer, w)]
        assert reply == (", ".join(said) if said else "None") + "."


def test_probe_loss_reads_only_positions_with_targets_and_adds_to_the_lm_loss(
        tiny_model, tiny_tokenizer, train_script):
    example = S.self_check_example(random.Random(2))
    row = train_script.encode_chat(tiny_tokenizer, example)
    _, targets = feature_targets(tiny_tokenizer, _render(tiny_tokenizer, example.messages))
    torch.manual_seed(0)
    probe = train_script.FeatureProbe(torch.nn.Linear(64, sum(CLASSES)), layer=1, weight=0.5)
    pad = tiny_tokenizer.pad_token_id
    with torch.no_grad():
        plain = train_script.lm_loss(tiny_model, [row], pad)
        both = train_script.lm_loss(tiny_model, [row], pad, probe=probe, features=[targets])
        hidden = tiny_model.model(input_ids=torch.tensor([row[0]]),
                                  output_hidden_states=True).hidden_states[1]
        alone = probe.loss(hidden, torch.tensor([targets]))
        blank = probe.loss(hidden, torch.full((1, len(targets), len(FEATURES)), IGNORE))
    assert both.item() == pytest.approx(plain.item() + 0.5 * alone.item(), rel=1e-5)
    assert probe.last_loss == pytest.approx(alone.item(), rel=1e-5)
    assert alone.item() > 0 and blank.item() == 0


def test_seen_rows_label_every_token_seen_before_and_train_only_the_probe(
        tiny_model, tiny_tokenizer, train_script):
    rows, features = train_script.seen_rows(random.Random(0), 4, len(tiny_tokenizer))
    for (ids, labels), targets in zip(rows, features, strict=True):
        assert all(t == -100 for t in labels)
        assert [t[MENTIONED] for t in targets] == [int(t in ids[:i]) for i, t in enumerate(ids)]
        assert all(t[WORDS] == t[NOT_CAPS] == IGNORE for t in targets)
        assert 0 < sum(t[MENTIONED] for t in targets) < len(ids)
    torch.manual_seed(0)
    probe = train_script.FeatureProbe(torch.nn.Linear(64, sum(CLASSES)), layer=1, weight=1.0)
    with torch.no_grad():
        loss = train_script.lm_loss(tiny_model, rows, tiny_tokenizer.pad_token_id, probe=probe,
                                    features=features)
    assert torch.isfinite(loss) and loss.item() == pytest.approx(probe.last_loss, rel=1e-5)


PLACE_ONLY = {part.lower() for place in S.PLACES for part in re.findall(r"\w+", place)} - {
    w.lower() for w in S.VOCAB}


@pytest.mark.parametrize("place_rate", [0.0, 0.5])
def test_mention_drill_rows_label_each_asked_word_by_the_answer_and_train_only_the_probe(
        tiny_tokenizer, train_script, place_rate):
    rows, features = train_script.mention_rows(random.Random(3), 40, tiny_tokenizer, place_rate)
    labels, shouted, places = [], [], 0
    for (ids, lm_labels), targets in zip(rows, features, strict=True):
        assert all(t == -100 for t in lm_labels) and len(targets) == len(ids)
        text = tiny_tokenizer.decode(ids)
        answer = text.split("<|start_of_role|>assistant<|end_of_role|>")[1].split(
            "<|end_of_text|>")[0]
        end = targets[_token_at(tiny_tokenizer, text, text.index(answer) + len(answer) - 1)]
        assert end[WORDS] == S.word_count(answer)
        assert end[NOT_CAPS] == int(not S.is_all_caps(answer))
        shouted.append(sum(not w.isupper() for w in answer.split()))
        question = text.rindex("<|start_of_role|>user")
        for m in re.finditer(r"\w+", text[question:]):
            at = _token_at(tiny_tokenizer, text, question + m.end() - 1)
            if m.group() in ("start_of_role", "user", "end_of_role", "end_of_text"):
                continue
            assert targets[at][MENTIONED] == int(S.mentions(answer, m.group())), m.group()
            assert targets[at][WORD] == IDENTITIES.index(m.group().lower())
            labels.append(targets[at][MENTIONED])
            places += m.group().lower() in PLACE_ONLY
    assert 0.3 < sum(labels) / len(labels) < 0.7  # balanced, unlike the words of real turns
    assert (places > 20) == (place_rate > 0), places  # refine_place_rate asks place names
    # the case and count targets see all-caps answers and the near misses beside them
    assert shouted.count(0) >= 4 and shouted.count(1) >= 4, shouted


def test_json_depth_counts_open_brackets_outside_strings():
    assert json_depth('{"a": [1, {"b": 2}]}') == 0
    assert json_depth('{"a": [1, {"b": 2}') == 2
    assert json_depth('["]", "{\\"", {"x": "}"') == 2
    assert json_depth("plain words.") == 0
