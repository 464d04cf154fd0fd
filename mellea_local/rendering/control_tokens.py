"""Message text renders as text: only the chat template's own structure makes control tokens.

A chat template pastes message content into one string that is then tokenised, so content
that spells a special token (``<|start_of_role|>assistant<|end_of_role|>``) would become that
control token and forge a turn. Rendering therefore swaps every special-token spelling inside
the caller's strings for a random placeholder before the template runs, puts the text back
afterwards, and remembers where it went: those spans are tokenised as plain text.

When no string spells a special token (nearly always) nothing is swapped and the ids are
exactly those of ``apply_chat_template``, so nothing a model was trained on changes.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mellea_local.errors import InvalidInputError
from mellea_local.rendering.memo import MIN_TEXT, memoised, vocab_size

_PLACEHOLDER = "MLCT{nonce}N{index}E"
"""ASCII letters and digits only, so ``tojson``, ``trim`` and escaping leave it intact."""


def special_tokens(tokenizer: Any) -> tuple[str, ...]:
    """The tokenizer's special (control) token strings, longest first."""
    found = {str(t) for t in getattr(tokenizer, "all_special_tokens", None) or ()}
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    found |= {t.content for t in decoder.values() if getattr(t, "special", False)}
    return tuple(sorted((t for t in found if t), key=len, reverse=True))


@dataclass(frozen=True)
class RenderedPrompt:
    """A rendered prompt and the spans of it that must tokenise as plain text."""

    text: str
    literal: tuple[tuple[int, int], ...] = ()

    def encode(self, tokenizer: Any, start: int = 0, end: int | None = None) -> list[int]:
        """Token ids of ``text[start:end]``; special tokens inside literal spans are text."""
        end = len(self.text) if end is None else end
        spans = [(max(a, start), min(b, end)) for a, b in self.literal if a < end and b > start]
        if not spans:
            return _ids(tokenizer, self.text[start:end])
        ids: list[int] = []
        at = start
        for a, b in _regions(self.text, start, end, spans, special_tokens(tokenizer)):
            ids += _ids(tokenizer, self.text[at:a])
            ids += _ids(tokenizer, self.text[a:b], split_special_tokens=True)
            at = b
        return ids + _ids(tokenizer, self.text[at:end])


    def encode_piece(self, tokenizer: Any, piece: str) -> list[int]:
        """``encode`` of a prefix or suffix of ``text`` given as a string (prefix preferred).

        For code that cuts the text by position and encodes the pieces (an adapter kind
        splicing its invocation): the literal spans follow the piece.
        """
        if not self.literal:
            return _ids(tokenizer, piece)
        if self.text.startswith(piece):
            return self.encode(tokenizer, 0, len(piece))
        if self.text.endswith(piece):
            return self.encode(tokenizer, len(self.text) - len(piece))
        raise InvalidInputError(
            f"{piece[:40]!r}... is neither a prefix nor a suffix of the prompt."
        )


def _ids(tokenizer: Any, text: str, **kwargs: Any) -> list[int]:
    if not text:
        return []
    if len(text) < MIN_TEXT:
        return list(tokenizer(text, add_special_tokens=False, **kwargs)["input_ids"])
    key = (text, vocab_size(tokenizer), tuple(sorted(kwargs.items())))
    return list(memoised(tokenizer, "encode", key, lambda: tuple(
        tokenizer(text, add_special_tokens=False, **kwargs)["input_ids"])))


def _regions(
    text: str, start: int, end: int, spans: list[tuple[int, int]], specials: tuple[str, ...]
) -> list[tuple[int, int]]:
    """Each literal span widened to the template's control tokens around it, merged.

    The tokenizer splits its input at special tokens anyway, so tokenising from one control
    token to the next on its own gives the ids it would give in context.
    """
    structural = [
        (m.start(), m.end()) for m in re.finditer("|".join(map(re.escape, specials)),
                                                  text[start:end])
    ] if specials else []
    structural = [(a + start, b + start) for a, b in structural
                  if not any(s <= a + start < e for s, e in spans)]
    regions: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        left = max((e for s, e in structural if e <= a), default=start)
        right = min((s for s, e in structural if s >= b), default=end)
        if regions and left <= regions[-1][1]:
            regions[-1] = (regions[-1][0], max(regions[-1][1], right))
        else:
            regions.append((left, right))
    return regions


_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_surrogates(text: str, where: str) -> None:
    found = _SURROGATE.search(text)
    if found:
        raise InvalidInputError(
            f"{where} holds a lone surrogate (U+{ord(found.group()):04X} at character "
            f"{found.start()}), which is not Unicode text and cannot be tokenised; decode the "
            "source bytes with errors='replace' (or remove the character) before passing it."
        )


class Neutraliser:
    """Swaps special-token spellings in strings for placeholders, and back after rendering."""

    def __init__(self, tokenizer: Any) -> None:
        self._specials = special_tokens(tokenizer)
        self._pattern = re.compile("|".join(map(re.escape, self._specials))) \
            if self._specials else None
        self._nonce = secrets.token_hex(8)
        self._swapped: list[str] = []

    def __call__(self, value: Any, where: str = "messages") -> Any:
        """A copy of ``value`` (dicts, lists, strings) with special-token text swapped out.

        Every string passes here on its way to the tokenizer, so this is also where text that
        is not Unicode (a lone surrogate, say from bytes decoded with ``surrogateescape``) is
        refused with its place named; the tokenizer would fail with a bare ``TypeError``.
        """
        if isinstance(value, str):
            _refuse_surrogates(value, where)
            return self._pattern.sub(self._swap, value) if self._pattern else value
        if isinstance(value, Mapping):
            return {k: self(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    def _swap(self, match: re.Match[str]) -> str:
        self._swapped.append(match.group(0))
        return _PLACEHOLDER.format(nonce=self._nonce, index=len(self._swapped) - 1)

    def restore(self, text: str) -> RenderedPrompt:
        """Put the swapped text back into the rendered ``text``, recording where it went."""
        if not self._swapped:
            return RenderedPrompt(text)
        pattern = re.compile(_PLACEHOLDER.format(nonce=self._nonce, index=r"(\d+)"))
        out: list[str] = []
        literal: list[tuple[int, int]] = []
        at = length = 0
        for m in pattern.finditer(text):
            out.append(text[at:m.start()])
            length += m.start() - at
            original = self._swapped[int(m.group(1))]
            out.append(original)
            literal.append((length, length + len(original)))
            length += len(original)
            at = m.end()
        out.append(text[at:])
        return RenderedPrompt("".join(out), tuple(literal))
