"""The prompt-building memos return exactly what a fresh render and encode return."""

from __future__ import annotations

import copy

from mellea_local.bench.subjects import conversation
from mellea_local.rendering import memo, render_prompt, to_chat_messages, to_message_dicts


def _history(tokenizer, seed: int) -> list[dict]:
    ctx = conversation(tokenizer, 600, seed=seed)
    return to_message_dicts(to_chat_messages(list(ctx.view_for_generation())))


def test_a_repeat_equals_a_fresh_render_and_encode(tiny_tokenizer):
    history = _history(tiny_tokenizer, 1)
    first = render_prompt(tiny_tokenizer, history, None, {})
    ids = first.encode(tiny_tokenizer)
    again = render_prompt(tiny_tokenizer, history, None, {})
    assert again == first and again.encode(tiny_tokenizer) == ids
    fresh = copy.deepcopy(tiny_tokenizer)  # an equal tokenizer object, no memo of its own
    assert render_prompt(fresh, history, None, {}).encode(fresh) == ids
    assert ids == list(tiny_tokenizer(first.text, add_special_tokens=False)["input_ids"])


def test_a_caller_mutating_the_ids_does_not_change_the_memo(tiny_tokenizer):
    rendered = render_prompt(tiny_tokenizer, _history(tiny_tokenizer, 2), None, {})
    ids = rendered.encode(tiny_tokenizer)
    want = list(ids)
    ids.append(0)
    ids[0] = -1
    assert rendered.encode(tiny_tokenizer) == want


def test_a_changed_template_or_message_is_rendered_again(tiny_tokenizer):
    tokenizer = copy.deepcopy(tiny_tokenizer)
    history = _history(tokenizer, 3)
    before = render_prompt(tokenizer, history, None, {}).text
    edited = [*history[:-1], {**history[-1], "content": history[-1]["content"] + " more"}]
    assert render_prompt(tokenizer, edited, None, {}).text != before
    tokenizer.chat_template = tokenizer.chat_template.replace("<|start_of_role|>",
                                                              "<|start_of_role|> ")
    assert render_prompt(tokenizer, history, None, {}).text != before


def test_arguments_that_are_not_plain_json_are_not_memoised():
    assert memo.json_key({"a": [1, "x"]}) is not None
    assert memo.json_key({"a": object()}) is None
    assert memo.json_key(float("nan")) is None
    assert memo.json_key({1: "x"}) is None  # json would write "1": a clash with {"1": "x"}


def test_keys_are_exact_across_json_types():
    """Values json.dumps writes differently never share a key."""
    keys = [memo.json_key(v) for v in (1, 1.0, True, "1", None, [1], {"1": 1}, [["1", 1]],
                                       {"a": [1, "x"]}, {"a": (1, "x")})]
    assert len(set(keys[:-1])) == len(keys) - 1
    assert keys[-2] == keys[-1]  # a tuple is a JSON array, as json.dumps writes it
    assert memo.json_key({"b": 1, "a": 2}) == memo.json_key({"a": 2, "b": 1})


def test_the_memo_is_bounded(tiny_tokenizer):
    tokenizer = copy.deepcopy(tiny_tokenizer)
    for i in range(memo.SIZE + 10):
        memo.memoised(tokenizer, "test", i, lambda i=i: i)
    assert len(memo._memos[tokenizer]["test"]) == memo.SIZE
