"""Train-time token embeddings split into a word part and a spelling-form part.

Byte-level BPE gives " bread", "bread", " Bread" and " BREAD" four unrelated rows, so a tiny
model trained on a few million tokens never learns that they are one word, nor which of its
4096 rows are upper case: asked whether an answer is all capitals, or mentions a word, the
first trained base answered from cues in the question, not from the answer. Here every row is
``own[token] + word[key] + form[form]``: the key is the token's text without its leading space,
lower-cased, shared by all spellings; the form says leading space or not and lower /
Capitalised / UPPER / no letters. The shared parts start at zero and collect the gradients of
every row that uses them, so case and word starts become a few shared directions, as salient
as digits, while the own rows keep every token as distinct as a plain embedding does (a first
version without them, shared parts drawn at random, slowed the copying circuit ReACT needs:
copy loss 2.5 against 0.42 after the same training).

Only training sees the split: :func:`materialize` folds it back into one ordinary tied
embedding matrix, so the saved model is a plain Llama checkpoint.

Not used by the shipped base: a full-budget run with it read case and words better (mentions
49 -> 61.5 %) but copied digits worse (ReACT calculator 76 -> 2 %, operands off by one digit),
so it stays an experiment (``train_embedded.py --set factor_embeddings=1``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from mellea_local.errors import EmbeddedModelError

SPACE = "\u0120"  # byte-level BPE's spelling of a leading space


def spelling(token: str) -> tuple[str, str]:
    """``(key, form)`` of a byte-level token: ``"ĠBread"`` -> ``("bread", "space-capital")``."""
    space = token.startswith(SPACE) and len(token) > 1
    core = token[1:] if space else token
    letters = [c for c in core if c.isascii() and c.isalpha()]
    if not letters:
        case = "none"
    elif all(c.islower() for c in letters):
        case = "lower"
    elif letters[0].isupper() and all(c.islower() for c in letters[1:]):
        case = "capital"  # a lone capital ("M" of "M|akes") counts here
    elif all(c.isupper() for c in letters):
        case = "upper"
    else:
        case = "mixed"
    key = "".join(c.lower() if c.isascii() else c for c in core)  # bytes stay as they are
    return key, f"{'space-' if space else ''}{case}"


class FactoredEmbedding(nn.Module):
    """``matrix()[i] = own[i] + word[key(i)] + form[form(i)]``; special tokens get own keys."""

    def __init__(self, tokenizer: Any, initial: torch.Tensor) -> None:
        """``initial``: the plain embedding to start from (the own rows); shared parts are 0."""
        super().__init__()
        special = set(tokenizer.all_special_tokens) | {
            str(t) for t in tokenizer.get_added_vocab()}
        keys: dict[str, int] = {}
        forms: dict[str, int] = {}
        key_index, form_index = [], []
        for token in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))):
            key, form = (token, "special") if token in special else spelling(token)
            key_index.append(keys.setdefault(key, len(keys)))
            form_index.append(forms.setdefault(form, len(forms)))
        if initial.shape[0] != len(key_index):
            raise EmbeddedModelError(
                f"initial has {initial.shape[0]} rows for {len(key_index)} tokens"
            )
        self.own = nn.Parameter(initial.detach().clone())
        self.word = nn.Parameter(initial.new_zeros(len(keys), initial.shape[1]))
        self.form = nn.Parameter(initial.new_zeros(len(forms), initial.shape[1]))
        self.register_buffer("key_index", torch.tensor(key_index), persistent=False)
        self.register_buffer("form_index", torch.tensor(form_index), persistent=False)

    def matrix(self) -> torch.Tensor:
        return self.own + self.word[self.key_index] + self.form[self.form_index]


class _Reads(nn.Module):
    """The input embedding (``F.embedding``) or the tied head (``F.linear``) over one matrix."""

    def __init__(self, factored: FactoredEmbedding, op: Any) -> None:
        super().__init__()
        self.factored, self.op = factored, op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x, self.factored.matrix())


def factor_embeddings(model: Any, tokenizer: Any) -> FactoredEmbedding:
    """Swap `model`'s tied embedding and LM head for one :class:`FactoredEmbedding` that starts
    as the current embedding, so the model computes what it computed before."""
    factored = FactoredEmbedding(tokenizer, model.model.embed_tokens.weight)
    model.model.embed_tokens = _Reads(factored, F.embedding)
    model.lm_head = _Reads(factored, F.linear)
    return factored


def materialize(model: Any) -> None:
    """Fold a factored embedding back into a plain tied ``nn.Embedding`` (what is saved)."""
    head = model.lm_head
    if not isinstance(head, _Reads):
        return
    weight = head.factored.matrix().detach().clone()
    model.model.embed_tokens = nn.Embedding.from_pretrained(
        weight, freeze=False, padding_idx=model.config.pad_token_id)
    model.lm_head = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    model.lm_head.weight = model.model.embed_tokens.weight
