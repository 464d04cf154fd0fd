"""Turning an intrinsic's prompts into results, over an adapter runner.

Two paths, chosen per adapter:

- the **fast path** (one ``likelihood`` over one string-enum field, then only ``nest``): append
  the forced JSON prefix up to the value (``{"score": "``), read the next-token distribution
  once for the whole batch, sum each category's tokens, apply the rules;
- the **general path** (any other io.yaml): constrained greedy generation with top-k logprobs,
  then the rules, as the public result processor does.

Both read probabilities at the call's temperature and agree where both apply (tested).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from mellea_local.adapters import (
    Adapter,
    AdapterRunner,
    FastPathSpec,
    TokenLogprob,
    TokenPrompt,
    apply_transformations,
    final_channel,
)
from mellea_local.adapters.sentences import MarkedInputs
from mellea_local.errors import IntrinsicOutputError
from mellea_local.intrinsics.intrinsic import Intrinsic
from mellea_local.intrinsics.options import ScoringOptions
from mellea_local.intrinsics.prompt import encode

TOP_K = 10
"""Alternatives read per generated token (the public processor reads the top 10)."""

DEFAULT_MAX_TOKENS = 16
"""Generation budget when neither the call nor the io.yaml sets one."""


class CategoryTokens:
    """For one fast-path spec and tokenizer: the forced value prefix and each category's ids."""

    def __init__(self, tokenizer: Any, spec: FastPathSpec) -> None:
        self.forced = encode(tokenizer, spec.json_prefix)
        # The fast path is only exact if every category continues the forced tokens as they
        # are: then the value starts at a token boundary, as in constrained generation.
        self.canonical = all(
            encode(tokenizer, spec.json_prefix + c)[: len(self.forced)] == self.forced
            for c in spec.categories
        )
        pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        ids: dict[str, list[int]] = {c: [] for c in spec.categories}
        for token_id, piece in enumerate(pieces):
            category = spec.likelihood.category_for_token(piece, in_string=True)
            if category in ids:
                ids[category].append(token_id)
        self.ids = {c: torch.tensor(v, dtype=torch.long) for c, v in ids.items()}
        self.read = torch.tensor(sorted(i for v in ids.values() for i in v), dtype=torch.long)
        """Every category's ids: what a runner is told the caller reads (``read=``)."""


# Built once per (tokenizer, spec): scanning a 100k vocabulary takes about a second.
_TABLES: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], CategoryTokens]] = (
    weakref.WeakKeyDictionary())
_TABLES_LOCK = threading.Lock()


def category_tokens(tokenizer: Any, spec: FastPathSpec) -> CategoryTokens:
    """The (cached) category table of ``spec`` under ``tokenizer``."""
    # What the table depends on: the forced prefix and the categories in io.yaml order.
    key = (spec.json_prefix, spec.categories, tuple(spec.likelihood.categories_to_values))
    with _TABLES_LOCK:
        tables = _TABLES.setdefault(tokenizer, {})
        if key not in tables:
            tables[key] = CategoryTokens(tokenizer, spec)
        return tables[key]


def fast_path_for(runner: AdapterRunner, intrinsic: Intrinsic) -> FastPathSpec | None:
    """The fast-path spec when it is exact for this tokenizer, else None."""
    spec = intrinsic.fast_path
    if spec is None or not category_tokens(runner.tokenizer, spec).canonical:
        return None
    return spec


async def score_fast(
    runner: AdapterRunner, intrinsic: Intrinsic, adapter: Adapter, spec: FastPathSpec,
    prompts: Sequence[TokenPrompt], options: ScoringOptions, *, reuse: bool = True,
) -> list[Any]:
    """Results of every prompt from one batched next-token distribution."""
    table = category_tokens(runner.tokenizer, spec)
    rows = [p.ids + table.forced for p in prompts]
    shared = min(p.shared for p in prompts)
    logprobs = await runner.next_token_logprobs(adapter, rows, shared, reuse=reuse,
                                                read=table.read)
    return results_from_logprobs(runner, intrinsic, spec, logprobs, options)


def results_from_logprobs(
    runner: AdapterRunner, intrinsic: Intrinsic, spec: FastPathSpec, logprobs: torch.Tensor,
    options: ScoringOptions,
) -> list[Any]:
    """The fast path's results from the next-token log-probabilities after each forced row."""
    table = category_tokens(runner.tokenizer, spec)
    if options.temperature > 0:
        logprobs = logprobs / options.temperature
    probs = torch.softmax(logprobs.float(), dim=-1)
    results = []
    for row in probs:
        mass = {c: float(row[idx.to(row.device)].sum()) for c, idx in table.ids.items()}
        results.append(spec.result_from_probs(mass, name=intrinsic.name))
    return results


async def score_general(
    runner: AdapterRunner, intrinsic: Intrinsic, adapter: Adapter, prompt: TokenPrompt,
    options: ScoringOptions, *, reuse: bool = True, marked: MarkedInputs | None = None,
) -> Any:
    """The result of one prompt by constrained greedy generation and the io.yaml rules;
    ``marked`` is the request's marked texts (for ``decode_sentences``)."""
    io = intrinsic.config
    budget = options.max_new_tokens or int(
        io.parameters.get("max_completion_tokens", DEFAULT_MAX_TOKENS))
    tokens = await runner.generate_with_adapter(
        adapter, prompt.ids, prompt.shared, json_schema=io.response_format_dict(),
        max_new_tokens=budget, top_logprobs=TOP_K, reuse=reuse)
    if io.logprobs_workaround:
        tokens = list(final_channel(tokens))
    text = "".join(t.token for t in tokens)
    try:
        parsed = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise IntrinsicOutputError(
            f"Intrinsic {intrinsic.name!r}: adapter {adapter.name!r} did not return JSON within "
            f"{budget} tokens ({text[:200]!r}); raise ModelOption.MAX_NEW_TOKENS (or "
            "max_completion_tokens in its io.yaml) or check that it fits this base model."
        ) from exc
    return apply_transformations(io.transformations, parsed,
                                 logprobs=_at_temperature(tokens, options.temperature),
                                 name=intrinsic.name, sentences=marked,
                                 schema=io.response_format)


def _at_temperature(tokens: list[TokenLogprob], temperature: float) -> list[TokenLogprob]:
    """Logprobs read at ``temperature``: each divided by T. Unnormalised, which the rules do
    not mind: a likelihood weighs categories against each other, so the normaliser cancels."""
    if temperature <= 0:
        return tokens
    return [replace(t, logprob=t.logprob / temperature,
                    top_logprobs=tuple((s, lp / temperature) for s, lp in t.top_logprobs))
            for t in tokens]
