"""JSON-schema constrained decoding as a transformers ``LogitsProcessor`` (llguidance).

The processor masks every token the grammar forbids, so greedy or sampled decoding can only
produce text the schema accepts. Whitespace is bounded but not forbidden: a grammar with no
whitespace at all makes greedy decoding collapse arrays to ``[]`` (the peer's #1510).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import LogitsProcessor

from mellea_local.adapters.transformations import TokenLogprob
from mellea_local.errors import ConstrainedDecodingError

WHITESPACE_PATTERN = r"[\x20\x0A\x0D\x09]{0,20}"


@functools.cache
def _ll_tokenizer(tokenizer: Any, n_vocab: int) -> Any:
    import llguidance.hf

    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=n_vocab)


@functools.cache
def _closers(tokenizer: Any, n_vocab: int
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per token, whether it closes what is open, in the closing mode's order of preference
    (:class:`GrammarLogitsProcessor`): ``values`` (only quotes, braces, brackets; EOS),
    ``items`` (those with a comma: on to the next required item), ``tags`` (a closing
    tag's ``</``, the tag itself where it is one token; EOS) and ``quotes`` (those of
    ``values`` and ``items`` that begin with a quote: inside a JSON string a brace or bracket
    is content, only the quote closes it)."""
    values, items, tags, quotes = (torch.zeros(n_vocab, dtype=torch.bool) for _ in range(4))
    for token_id in range(min(n_vocab, len(tokenizer))):
        text = tokenizer.decode([token_id]).strip()
        if text.startswith("</"):
            tags[token_id] = True
        elif text and set(text) <= set('"}]'):
            values[token_id] = True
        elif text and set(text) <= set('"}],'):
            items[token_id] = True
        if text.startswith('"') and set(text) <= set('"}],'):
            quotes[token_id] = True
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int) and eos < n_vocab:
        values[eos] = tags[eos] = True
    return values, items, tags, quotes


def _inside_json_string(text: str) -> bool:
    """Whether ``text`` (a call's JSON so far) ends inside a string literal."""
    inside = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and inside:
            escaped = True
        elif char == '"':
            inside = not inside
    return inside


def json_schema_grammar(schema: dict[str, Any] | str) -> str:
    """An llguidance grammar for a JSON schema, with bounded flexible whitespace."""
    from llguidance import LLMatcher

    return LLMatcher.grammar_from_json_schema(
        schema if isinstance(schema, str) else json.dumps(schema),
        overrides={"whitespace_pattern": WHITESPACE_PATTERN},
    )


class GrammarLogitsProcessor(LogitsProcessor):
    """Mask logits to the grammar, one matcher per batch row.

    The matcher is fed the token chosen at the previous step before each new mask, so it
    tracks exactly what the model wrote. ``prompt_len`` tells it where generation starts;
    ``vocab_size`` is the width of the model's logits (at least the tokenizer's size).
    """

    def __init__(
        self,
        tokenizer: Any,
        grammar: str,
        vocab_size: int,
        prompt_len: int,
        *,
        fast_forward: bool = False,
        budget: int | None = None,
        reserve: int | tuple[int, int] = 0,
    ) -> None:
        """``budget`` (the generation's ``max_new_tokens``) and ``reserve`` (tokens, or
        ``(in a thought, in the tool call)``, ``parsing.tool_grammar.closing_reserve``): once
        fewer than that many tokens are left, the *closing mode*: among the tokens the grammar
        allows,
        only those that close what is open (a string's quote, a brace, a closing tag, EOS) or
        else move to the next item (a comma) stay, so a bounded output finishes before the
        limit instead of being cut off. Where the grammar allows none of them (a value's
        first character), it is unchanged."""
        from llguidance import LLMatcher

        # fast_forward: where the grammar forces text (e.g. `{"score": "`), allow only its
        # canonical tokenization, so the model is conditioned exactly as a caller that forces
        # that prefix by tokenizing it (the intrinsic fast path) would condition it.
        self._fast_forward = fast_forward
        self._vocab_size = vocab_size
        self._lltok = _ll_tokenizer(tokenizer, vocab_size)
        self._grammar = grammar
        self._prompt_len = prompt_len
        self._matchers: list[Any] = []
        self._LLMatcher = LLMatcher
        self._reserves = (reserve, reserve) if isinstance(reserve, int) else tuple(reserve)
        self._budget = budget
        self._closing_from = None if budget is None else max(budget - max(self._reserves), 0)
        self._tokenizer = tokenizer
        check = LLMatcher(self._lltok, grammar)
        if check.is_error():
            raise ConstrainedDecodingError(
                f"Cannot build a grammar from the schema: {check.get_error()}; simplify the "
                "pydantic model (plain fields, enums, lists, nested models)."
            )

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        import llguidance.torch as llt

        batch = input_ids.shape[0]
        if not self._matchers:
            self._matchers = [self._LLMatcher(self._lltok, self._grammar) for _ in range(batch)]
        elif input_ids.shape[1] > self._prompt_len:
            for row, matcher in enumerate(self._matchers):
                if not matcher.is_stopped():
                    matcher.consume_token(int(input_ids[row, -1]))
                if matcher.is_error():
                    raise ConstrainedDecodingError(
                        f"Constrained decoding failed: {matcher.get_error()}."
                    )
        mask = llt.allocate_token_bitmask(batch, self._vocab_size)
        for row, matcher in enumerate(self._matchers):
            forced = matcher.compute_ff_tokens() if self._fast_forward else []
            if forced:
                mask[row] = 0
                bit = forced[0] % 32  # int32 words: bit 31 is the sign bit
                mask[row, forced[0] // 32] = (1 << bit) if bit < 31 else -(1 << 31)
            else:
                llt.fill_next_token_bitmask(matcher, mask, row)
        llt.apply_token_bitmask_inplace(scores, mask.to(scores.device))
        if (self._closing_from is not None
                and input_ids.shape[1] - self._prompt_len >= self._closing_from):
            self._close(input_ids, scores, input_ids.shape[1] - self._prompt_len)
        return scores

    def _close(self, input_ids: torch.LongTensor, scores: torch.FloatTensor,
               written_count: int) -> None:
        """The closing mode: keep each row's allowed closers, the first kind that has one.

        Before a call opens (a thought: free text, where a quote is content) only a closing
        tag ends anything; inside the call a quote, brace or bracket closes the value, a
        comma moves on to the next required one, and after it the closing tag ends the step.
        """
        values, items, tags, quotes = _closers(self._tokenizer, self._vocab_size)
        width = scores.shape[-1]
        for row in range(scores.shape[0]):
            written = self._tokenizer.decode(input_ids[row, self._prompt_len:].tolist())
            in_call = "<tool_call>" in written
            assert self._budget is not None
            if written_count < self._budget - self._reserves[1 if in_call else 0]:
                continue
            if in_call and _inside_json_string(written.rsplit("<tool_call>", 1)[1]):
                # "]]}}" would be more of the string: only a token that begins with its
                # closing quote closes it (where the grammar allows none yet, e.g. a minimum
                # length, the row is left as it is and the next token tries again).
                order: tuple[torch.Tensor, ...] = (quotes,)
            else:
                order = (values, items, tags) if in_call else (tags,)
            allowed = torch.isfinite(scores[row])
            for closers in order:
                keep = allowed & closers[:width].to(scores.device)
                if keep.any():
                    scores[row, ~keep] = -math.inf
                    break


def compact_json_grammar(schema: Mapping[str, Any]) -> str:
    """The llguidance grammar an intrinsic's output is held to: ``response_format`` with the
    separators the adapters were trained on (``": "``, ``", "``) and no free whitespace."""
    from llguidance import LLMatcher

    return LLMatcher.grammar_from_json_schema(
        json.dumps(schema),
        overrides={"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "},
    )


def token_logprobs(
    tokenizer: Any, new_ids: Sequence[int], scores: Sequence[torch.Tensor], top_k: int
) -> list[TokenLogprob]:
    """Generated tokens up to end-of-text, each with its logprob and the top-k alternatives
    under the processed scores (what a grammar allowed), as OpenAI-style entries."""
    new_ids, scores = list(new_ids), list(scores)
    eos = tokenizer.eos_token_id
    if eos in new_ids:
        cut = new_ids.index(eos)
        new_ids, scores = new_ids[:cut], scores[:cut]
    tokens = []
    for token_id, step in zip(new_ids, scores, strict=True):
        logp = torch.log_softmax(step, dim=-1)
        top = torch.topk(logp, top_k)
        alternatives = tuple(
            (tokenizer.decode([int(i)]), float(v))
            for v, i in zip(top.values, top.indices, strict=True) if math.isfinite(float(v))
        )
        tokens.append(TokenLogprob(tokenizer.decode([token_id]), float(logp[token_id]),
                                   alternatives))
    return tokens
