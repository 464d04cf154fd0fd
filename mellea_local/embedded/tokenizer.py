"""Build the embedded model family's tokenizer: byte-level BPE, offline, deterministic.

Tests and the demo cannot download a tokenizer, and a trained model is tied to its tokenizer's
ids, so the tokenizer is trained here from the fixed corpus in :mod:`.corpus`. The BPE trainer of
`tokenizers` is deterministic (same corpus, same merges, whatever the hash seed or thread count),
which makes two builds byte-identical; a test holds us to that. Building takes about a second.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from mellea_local.parsing.response import (
    THINK_CLOSE,
    THINK_OPEN,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
)

from .corpus import corpus_lines

END_OF_TEXT = "<|end_of_text|>"
START_OF_ROLE = "<|start_of_role|>"
END_OF_ROLE = "<|end_of_role|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = (END_OF_TEXT, START_OF_ROLE, END_OF_ROLE, PAD)

# Added but not special: one id each, yet kept by decode(skip_special_tokens=True), so the
# parser still sees where thinking and tool calls begin and end.
MARKUP_TOKENS = (THINK_OPEN, THINK_CLOSE, TOOL_CALL_OPEN, TOOL_CALL_CLOSE)

VOCAB_SIZE = 4096
MODEL_MAX_LENGTH = 8192

# Merges we refuse to learn. `>` + `:` would make `<requirements>:` (how the io.yaml instruction
# starts) tokenize differently from `<requirements>` (the aLoRA invocation), so the invocation
# would never occur in the prompt and PEFT would silently run the base model (mellea #1679).
_FORBIDDEN_MERGES = frozenset({(">", ":")})


def chat_template() -> str:
    """The Jinja chat template shipped with the package."""
    return resources.files(__package__).joinpath("chat_template.jinja").read_text("utf-8")


def response_template() -> dict[str, Any]:
    """The `tokenizer.parse_response` spec for our format (transformers' `response_template`)."""
    text = resources.files(__package__).joinpath("response_template.json").read_text("utf-8")
    return json.loads(text)


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    # Single digits: a number is spelled with the same tokens wherever it occurs (a tool
    # response, a JSON string, an answer), which lets a tiny model copy numbers.
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def _train_bpe(vocab_size: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train on the corpus, then drop the forbidden merges and everything built from them."""
    probe = Tokenizer(models.BPE())
    probe.pre_tokenizer = _pre_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size + len(_FORBIDDEN_MERGES),  # room for what we drop below
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    probe.train_from_iterator(corpus_lines(), trainer=trainer)
    model = json.loads(probe.to_str())["model"]
    trained_merges = [(a, b) for a, b in model["merges"]]
    results = {a + b for a, b in trained_merges}
    # Special tokens and the byte alphabet, in trained id order; merge results follow.
    tokens = [t for t in sorted(model["vocab"], key=model["vocab"].__getitem__) if t not in results]
    known = set(tokens)
    merges: list[tuple[str, str]] = []
    for a, b in trained_merges:
        if (a, b) in _FORBIDDEN_MERGES or a not in known or b not in known:
            continue
        if a + b not in known:
            if len(tokens) == vocab_size:
                break
            tokens.append(a + b)
            known.add(a + b)
        merges.append((a, b))
    return {token: i for i, token in enumerate(tokens)}, merges


def _build_backend() -> Tokenizer:
    vocab, merges = _train_bpe(VOCAB_SIZE - len(MARKUP_TOKENS))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = _pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    return tok


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Train the embedded family's tokenizer (about a second) and wrap it for transformers.

    Carries the chat template and the response template, so `apply_chat_template` and
    `parse_response` work on it and survive `save_pretrained`/`from_pretrained`. There is no
    BOS: the chat template writes every control token itself, and `encode` adds nothing.
    """
    return PreTrainedTokenizerFast(
        tokenizer_object=_build_backend(),
        bos_token=END_OF_TEXT,
        eos_token=END_OF_TEXT,
        pad_token=PAD,
        extra_special_tokens=[START_OF_ROLE, END_OF_ROLE],  # listed in all_special_tokens too
        chat_template=chat_template(),
        response_template=response_template(),
        model_max_length=MODEL_MAX_LENGTH,
        padding_side="left",  # decoder-only generation pads on the left
        clean_up_tokenization_spaces=False,
    )
