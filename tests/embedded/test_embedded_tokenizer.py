"""The embedded tokenizer: control tokens, determinism, and what a requirement check costs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mellea_local.embedded import (
    MARKUP_TOKENS,
    SPECIAL_TOKENS,
    VOCAB_SIZE,
    build_tokenizer,
)
from mellea_local.embedded.corpus import (
    REQUIREMENT_PHRASINGS,
    requirement_check_text,
)

CHECK_SUFFIX = (
    "<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>"
    + requirement_check_text("The response mentions paris.")
    + '<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>{"score": "'
)


def test_vocabulary_is_filled(tiny_tokenizer):
    # The corpus must be rich enough for the trainer to learn every merge we ask for.
    assert len(tiny_tokenizer) == VOCAB_SIZE


def test_control_tokens_are_single_ids(tiny_tokenizer):
    for token in SPECIAL_TOKENS + MARKUP_TOKENS:
        assert len(tiny_tokenizer(token, add_special_tokens=False)["input_ids"]) == 1, token
    assert set(SPECIAL_TOKENS) <= set(tiny_tokenizer.all_special_tokens)
    assert not set(MARKUP_TOKENS) & set(tiny_tokenizer.all_special_tokens)
    assert tiny_tokenizer.eos_token == "<|end_of_text|>"
    assert tiny_tokenizer.pad_token == "<|pad|>"
    assert tiny_tokenizer.padding_side == "left"


def test_markup_survives_skipping_special_tokens(tiny_tokenizer):
    text = "<|start_of_role|>assistant<|end_of_role|><think>a</think><tool_call>{}</tool_call>"
    ids = tiny_tokenizer(text + "<|end_of_text|><|pad|>", add_special_tokens=False)["input_ids"]
    assert tiny_tokenizer.decode(ids, skip_special_tokens=True) == (
        "assistant<think>a</think><tool_call>{}</tool_call>"
    )


def test_encode_adds_nothing(tiny_tokenizer):
    """No BOS or EOS: the chat template writes every control token itself."""
    tokens = tiny_tokenizer.tokenize("hello")
    assert tiny_tokenizer("hello")["input_ids"] == tiny_tokenizer.convert_tokens_to_ids(tokens)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",))))
def test_any_text_round_trips(tiny_tokenizer, text):
    ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tiny_tokenizer.decode(ids) == text


def test_requirement_check_suffix_is_short(tiny_tokenizer):
    ids = tiny_tokenizer(CHECK_SUFFIX, add_special_tokens=False)["input_ids"]
    assert len(ids) < 85
    # Every word and punctuation run of the instruction and of the six phrasings (as the
    # pre-tokenizer splits them) is a single token: the corpus taught all of them.
    pre_tokenize = tiny_tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str
    for phrasing in REQUIREMENT_PHRASINGS:
        text = requirement_check_text(phrasing.format(word="water", n=7))
        for piece, _ in pre_tokenize(text):
            if piece == ">:":  # split on purpose, see the next test
                continue
            assert len(tiny_tokenizer.backend_tokenizer.model.tokenize(piece)) == 1, piece


def test_chat_roles_are_single_tokens(tiny_tokenizer):
    for role in ("system", "user", "assistant"):
        assert len(tiny_tokenizer.tokenize(role)) == 1, role


def test_requirements_tag_is_a_token_prefix_of_the_instruction(tiny_tokenizer):
    """An aLoRA invoked by `<requirements>` must find those ids inside `<requirements>: ...`."""
    tag = tiny_tokenizer("<requirements>", add_special_tokens=False)["input_ids"]
    with_colon = tiny_tokenizer("<requirements>:", add_special_tokens=False)["input_ids"]
    assert with_colon[: len(tag)] == tag
    full = tiny_tokenizer(CHECK_SUFFIX, add_special_tokens=False)["input_ids"]
    assert any(full[i : i + len(tag)] == tag for i in range(len(full)))


def test_digits_are_single_tokens_everywhere(tiny_tokenizer):
    """A number is spelled the same in an answer, a JSON string and a tool response."""

    def digits(text: str) -> list[str]:
        return [t for t in tiny_tokenizer.tokenize(text) if any(c.isdigit() for c in t)]

    expected = list("2026")
    assert digits(" 2026") == digits('"2026"') == digits("x2026.") == expected


def _save_files(tok, path: Path) -> dict[str, bytes]:
    tok.save_pretrained(path)
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def test_two_builds_are_byte_identical(tiny_tokenizer, tmp_path):
    first = _save_files(tiny_tokenizer, tmp_path / "a")
    second = _save_files(build_tokenizer(), tmp_path / "b")
    assert set(first) >= {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}
    assert first == second


_PRINT_HASH = (
    "import hashlib; from mellea_local.embedded import build_tokenizer; "
    "print(hashlib.sha256(build_tokenizer().backend_tokenizer.to_str().encode()).hexdigest())"
)


@pytest.mark.slow
def test_builds_in_other_processes_are_identical(tiny_tokenizer):
    """Hash seeds and thread counts differ between processes; the merges must not."""
    import hashlib

    here = hashlib.sha256(tiny_tokenizer.backend_tokenizer.to_str().encode()).hexdigest()
    for seed, threads in (("1", "1"), ("2", "2")):
        env = {**os.environ, "PYTHONHASHSEED": seed, "RAYON_NUM_THREADS": threads}
        out = subprocess.run(
            [sys.executable, "-c", _PRINT_HASH], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == here
