"""Dense per-token targets for the features requirement checks read: a training aid.

A check learns from one Yes/No per conversation, and that is too sparse a signal for some
circuits to form in a 3 M model: trained that way, the shipped aLoRA answered "yes" to 94 % of
"mentions" negatives (it never learned to look the word up in the response). On a toy task the
same base learns "was this token seen before?" to 97 % in 800 small steps once every position
carries a label. So while the base trains, a linear probe on a middle layer predicts, at every
token after an assistant turn starts, what the checks ask about that turn so far:

- ``words``: its whitespace-separated word count (``synthetic.word_count``), capped;
- ``not_caps``: whether it is *not* all capitals (``synthetic.is_all_caps``);
- ``mentioned``: at the last token of each word, whether the turn (up to that word, or whole
  once the turn has ended) holds that word, whole and case-insensitive (``synthetic.mentions``);
- ``depth``: how many JSON brackets the turn has left open so far (outside strings), capped:
  most near-miss JSON an earlier aLoRA called valid was one closing bracket short.

Two more targets cover every token of the text, because "mentioned" is a look-up that a
small model only learns once its parts are given: the ``role`` of the turn a token is in
(whether a word was said by the assistant) and, at the last token of each known word, the
``word`` itself, lower-cased (so " river", "River" and " RIVER", three unrelated BPE spellings,
become one identity to match on). On a toy with three random token ids per word, dense
"seen in the assistant segment?" labels stayed near chance for 1000 steps with the role target
alone and reached 99 % in 600 steps with role and identity (issue 5 notes). In the real base
the look-up still did not form from these natural chats alone (aLoRA "mentions" at chance);
it did once balanced drills were added (``synthetic.mention_drill``): 52.5 -> 96 %.

The probe is dropped after training: the saved model is a plain Llama whose hidden states
carry these features where the adapters can read them. Targets come from the rendered text and
the tokenizer's offsets, with the predicates the labels use, so they cannot drift apart.
"""

from __future__ import annotations

import re
from typing import Any

from mellea_local.embedded.checks import PLACES, WORDS, is_all_caps, word_count
from mellea_local.embedded.tokenizer import (
    END_OF_ROLE,
    END_OF_TEXT,
    MARKUP_TOKENS,
    START_OF_ROLE,
    THINK_CLOSE,
    THINK_OPEN,
)

FEATURES = ("words", "not_caps", "mentioned", "depth", "role", "word")
WORD_CLASSES = 16
"""``words`` is a class in 0..15 (15 = "15 or more"): checks ask about at most 12 words."""
DEPTH_CLASSES = 4
"""``depth`` is a class in 0..3 (3 = "3 or more"; more closers than openers count as 0)."""
ROLES = ("system", "available_tools", "user", "assistant", "tool_response")
"""The chat template's turn headers; a token under any other header gets no ``role``."""
IDENTITIES: tuple[str, ...] = tuple(dict.fromkeys(
    [w.lower() for w in WORDS if w.isalpha()]
    + [part.lower() for place in PLACES for part in re.findall(r"\w+", place)]))
"""The lower-cased training words the ``word`` target names (never the held-out unseen ones)."""
_IDENTITY = {w: i for i, w in enumerate(IDENTITIES)}
CLASSES = (WORD_CLASSES, 2, 2, DEPTH_CLASSES, len(ROLES), len(IDENTITIES))
"""Probe outputs per feature, in ``FEATURES`` order."""
IGNORE = -100

_ASSISTANT = f"{START_OF_ROLE}assistant{END_OF_ROLE}"
# Role headers, end of text and markup are no words of any turn ("start_of_role", "user").
_HEADER = re.compile(rf"{re.escape(START_OF_ROLE)}(\w*){re.escape(END_OF_ROLE)}")
_CONTROL = re.compile("|".join(
    [_HEADER.pattern] + [re.escape(t) for t in (END_OF_TEXT, *MARKUP_TOKENS)]))
_WORD = re.compile(r"\w+")
_TURN_BLANK = [IGNORE] * FEATURES.index("role")
"""The targets about the latest answer, where a token has no answer to describe."""


def json_depth(text: str) -> int:
    """Brackets ``[`` and ``{`` opened and not yet closed, skipping string contents."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if escaped:
            escaped = False
        elif in_string:
            escaped = ch == "\\"
            in_string = ch != '"'
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
    return depth


def _turns(text: str) -> list[tuple[int, int, int]]:
    """``(header end, content start, content end)`` of each assistant turn; the content
    excludes thinking."""
    spans = []
    for m in re.finditer(re.escape(_ASSISTANT), text):
        start = m.end()
        if text.startswith(THINK_OPEN, start):
            close = text.find(THINK_CLOSE, start)
            start = close + len(THINK_CLOSE) if close >= 0 else len(text)
        end = text.find(END_OF_TEXT, start)
        spans.append((m.end(), start, len(text) if end < 0 else end))
    return spans


def feature_targets(tokenizer: Any, text: str) -> tuple[list[int], list[list[int]]]:
    """Token ids of ``text`` and, per token, its targets in ``FEATURES`` order.

    ``role`` and ``word`` cover the whole text. The others describe a token's turn, the
    latest assistant turn whose header ends at or before the token: tokens before the first
    assistant turn and inside thinking get ``IGNORE`` for them, and ``mentioned`` is ``IGNORE``
    except on the last token of a word.
    """
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    turns = _turns(text)
    token_at = [0] * (len(text) + 1)
    for i, (s, e) in enumerate(offsets):
        token_at[s:e] = [i] * (e - s)
    plain = _CONTROL.sub(lambda m: " " * len(m.group()), text)
    last_token_of = {token_at[m.end() - 1]: m for m in _WORD.finditer(plain)}
    headers = [(m.start(), ROLES.index(m.group(1)) if m.group(1) in ROLES else IGNORE)
               for m in _HEADER.finditer(text)]
    targets: list[list[int]] = []
    turn, header = -1, -1
    for i, (s, e) in enumerate(offsets):
        while header + 1 < len(headers) and headers[header + 1][0] <= s:
            header += 1
        while turn + 1 < len(turns) and turns[turn + 1][0] <= s:
            turn += 1
        word = last_token_of.get(i)
        everywhere = [headers[header][1] if header >= 0 else IGNORE,
                      _IDENTITY.get(word.group().lower(), IGNORE) if word else IGNORE]
        if turn < 0 or s < turns[turn][1]:
            targets.append(_TURN_BLANK + everywhere)
            continue
        _, start, end = turns[turn]
        prefix = text[start:min(e, end)]
        mentioned = IGNORE
        if word is not None:
            seen = text[start:min(word.start(), end)]
            mentioned = int(word.group().lower() in {w.lower() for w in _WORD.findall(seen)})
        targets.append([min(word_count(prefix), WORD_CLASSES - 1),
                        int(not is_all_caps(prefix)), mentioned,
                        max(0, min(json_depth(prefix), DEPTH_CLASSES - 1)), *everywhere])
    return ids, targets
