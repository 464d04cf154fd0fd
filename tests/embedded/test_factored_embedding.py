"""The train-time word + form embedding split, on the real tokenizer and a tiny real model."""

from __future__ import annotations

import pytest
import torch

from mellea_local.embedded import build_model, build_tokenizer
from mellea_local.embedded.factored_embedding import (
    FactoredEmbedding,
    factor_embeddings,
    materialize,
    spelling,
)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("\u0120bread", ("bread", "space-lower")),
        ("bread", ("bread", "lower")),
        ("\u0120Bread", ("bread", "space-capital")),
        ("\u0120RIVER", ("river", "space-upper")),
        ("M", ("m", "capital")),
        ("\u0120iPhone", ("iphone", "space-mixed")),
        ("7", ("7", "none")),
        ("\u0120", ("\u0120", "none")),  # a bare space is its own key, not an empty one
    ],
)
def test_spelling_splits_word_from_form(token, expected):
    assert spelling(token) == expected


def test_spellings_of_one_word_share_their_word_row(tok):
    factored = FactoredEmbedding(tok, torch.randn(len(tok), 16))
    with torch.no_grad():
        factored.word.normal_()
        factored.form.normal_()
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("\u0120river", "\u0120RIVER")}
    assert all(i != tok.unk_token_id for i in ids.values())
    river = ids["\u0120river"]
    assert torch.equal(factored.matrix()[river],
                       factored.own[river] + factored.word[factored.key_index[river]]
                       + factored.form[factored.form_index[river]])
    # Special tokens never share a row with text.
    specials = [tok.convert_tokens_to_ids(t) for t in tok.all_special_tokens]
    keys = factored.key_index[specials].tolist()
    assert len(set(keys)) == len(keys)
    assert not set(keys) & {int(factored.key_index[river])}


def test_training_updates_every_spelling_and_materialize_keeps_the_function(tok):
    model = build_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    ids = torch.tensor([tok.encode("the river is long", add_special_tokens=False)])
    with torch.no_grad():
        plain = model(input_ids=ids).logits
    factored = factor_embeddings(model, tok)
    with torch.no_grad():  # it starts as the plain embedding: same function
        assert torch.equal(model(input_ids=ids).logits, plain)
    river, upper = (tok.convert_tokens_to_ids(t) for t in ("\u0120river", "\u0120RIVER"))
    assert river in ids[0].tolist() and upper not in ids[0].tolist()
    before = factored.matrix().detach().clone()
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    after = factored.matrix().detach()
    # A word seen only as " river" moved " RIVER" too: the rows share the word part.
    assert not torch.equal(before[upper], after[upper])
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    materialize(model)
    assert isinstance(model.model.embed_tokens, torch.nn.Embedding)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, logits)
