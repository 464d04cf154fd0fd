"""Constrained generation on llama-server, one token per request, each token chosen here.

llama-server's own GBNF grammars differ from ours in whitespace, so a constrained generation
(``format=``, the general intrinsic path) asks the server only for the next-token
distribution (``n_predict: 1``, ``n_probs``) and applies our llguidance grammar to it, exactly
as ``LocalHFBackend`` masks its logits.

Our grammar's mask comes first: a token the grammar forces (``{"score": "``) is taken without
asking the server (the masked distribution is that one token). Otherwise the server's top
``n_probs`` raw logprobs are masked. What must be exact decides whether the top is enough
(``probabilities``): for greedy decoding only the argmax, exact whenever an allowed token is
among the top (any allowed token outside ranks below); when the distribution itself is read
(sampling, or the logprobs a general-path result reports), the allowed tokens' mass. Else a
wider top and at last the whole vocabulary are asked for (``read_sizes``).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import torch

from mellea_local.backends.constrained import GrammarLogitsProcessor
from mellea_local.backends.llama_server.probabilities import (
    complete,
    decided,
    has_any,
    read_sizes,
    undecided,
)

Ask = Callable[[list[int], int], Awaitable[torch.Tensor]]
"""``ask(prompt_ids, n_probs)``: the server's next-token logprobs after the prompt, dense."""


async def step_generate(
    ask: Ask, *, tokenizer: Any, n_vocab: int, n_probs: int, ids: list[int],
    grammar: str | None, gen_kwargs: Mapping[str, Any], budget: int,
    cancel: threading.Event | None = None, fast_forward: bool = False,
    scores_out: list[torch.Tensor] | None = None, reserve: tuple[int, int] | None = None,
) -> list[int]:
    """The new token ids (up to ``budget``, ending at end-of-text); each step's processed
    scores appended to ``scores_out`` when given. ``reserve``: the grammar's closing mode
    (``GrammarLogitsProcessor``) from that many tokens before ``budget``; None: none."""
    processor = None if grammar is None else GrammarLogitsProcessor(
        tokenizer, grammar, n_vocab, len(ids), fast_forward=fast_forward,
        budget=budget if reserve is not None else None, reserve=reserve or 0)
    temperature = float(gen_kwargs.get("temperature") or 0.0) if gen_kwargs.get(
        "do_sample") else 0.0
    rng = torch.Generator().manual_seed(int(gen_kwargs.get("seed") or 0))
    eot = tokenizer.eos_token_id
    whole = scores_out is not None or temperature > 0
    new_ids: list[int] = []

    async def read(allowed: torch.Tensor | None) -> torch.Tensor:
        for asked in read_sizes(n_probs, n_vocab):
            dense = await ask(ids + new_ids, asked)
            if whole:
                enough = decided(dense, allowed, complete=complete(dense))
            else:
                enough = allowed is None or has_any(dense, allowed)
            if enough:
                return dense
        raise undecided(dense)

    for _ in range(budget):
        if cancel is not None and cancel.is_set():
            break
        if processor is None:
            scores = await read(None)
        else:
            mask = processor(torch.tensor([ids + new_ids]), torch.zeros(1, n_vocab))[0]
            allowed = torch.isfinite(mask)
            # forced: the masked distribution is that one token, nothing to ask
            scores = mask if int(allowed.sum()) == 1 else await read(allowed) + mask
        if scores_out is not None:
            scores_out.append(scores.clone())
        if temperature > 0:
            probs = torch.softmax(scores / temperature, dim=-1)
            token = int(torch.multinomial(probs, 1, generator=rng))
        else:
            token = int(torch.argmax(scores))
        new_ids.append(token)
        if token == eot:
            break
    return new_ids
