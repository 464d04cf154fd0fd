"""Requirement-check families and their labelled examples, drawn from a seeded ``random.Random``.

What the shipped package needs of the embedded model's data: the six families
(``FAMILIES``), the Python predicate that labels each (``PREDICATES``), and the held-out check
set ``mellea-local bench`` scores the shipped adapters on (``check_examples`` from a seed the
training never draws). The rest of the training data (chats, self-checks, drills, ReACT
traces) and the per-token feature targets are the training lab's, beside the training script
(``scripts/embedded_lab/``), and are not in the wheel.

- ``check_example``: a conversation, one of the six requirement phrasings and the label a real
  Python predicate (``PREDICATES``) computes on the last assistant turn's content. Drawn
  label-first, so every family is balanced, with the hard negatives a shortcut would miss
  (one lowercase word among capitals, a ``?`` mid-text, JSON with a trailing comma, the word
  mentioned by the user but not in the response, word counts at the boundary).

``vocab="unseen"`` draws responses that hold at least one word from ``UNSEEN_WORDS``, real
English words that occur nowhere in the tokenizer corpus nor in adapter training: the honest
test of whether a check generalises beyond the training vocabulary.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mellea_local.errors import EmbeddedModelError, InvalidInputError

from .corpus import CAPITALS, REQUIREMENT_PHRASINGS, WORDS, requirement_check_text

__all__ = [
    "FAMILIES", "PHRASINGS", "PLACES", "PREDICATES", "UNSEEN_WORDS", "VOCAB", "CheckExample",
    "check_example", "check_examples", "check_user_turn", "ends_with_question_mark",
    "has_number", "has_unseen_word", "is_all_caps", "is_valid_json", "mentions",
    "pseudo_word", "requirement_for", "word_count",
]

Vocab = Literal["train", "unseen"]

FAMILIES = ("all_caps", "mentions", "max_words", "has_number", "question", "json")
"""The requirement families, in the order of ``REQUIREMENT_PHRASINGS``."""

PHRASINGS = dict(zip(FAMILIES, REQUIREMENT_PHRASINGS, strict=True))

MAX_WORDS_N = 12

# Number words are kept out of responses: "contains a number" is judged on digits, and a
# response saying "seven" would make that label a matter of opinion.
_NUMBER_WORDS_TEXT = """
zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred
thousand million billion half dozen pair first second third fourth fifth sixth seventh eighth
ninth tenth
"""
NUMBER_WORDS = frozenset(_NUMBER_WORDS_TEXT.split())
VOCAB: tuple[str, ...] = tuple(w for w in WORDS if w not in NUMBER_WORDS and w.isalpha())
"""Training words: the tokenizer corpus's word list, minus number words."""

PLACES: tuple[str, ...] = tuple(dict.fromkeys(name for pair in CAPITALS for name in pair))

_UNSEEN_TEXT = """
zebra violin galaxy pepper walnut canyon tulip lantern pillow marble dolphin harbor
velvet comet jungle puzzle rocket saddle meadow kettle trumpet glacier parrot cactus
carpet anchor basket candle donkey feather giraffe hammer insect jacket kitten ladder
magnet needle oyster peanut pirate quilt raccoon scarf thunder turtle umbrella vulture
wizard yogurt zipper almond blanket cherry dragon engine falcon goblet helmet igloo jigsaw
koala lobster mango napkin olive panda pencil sailor tomato unicorn vessel walrus
beetle biscuit bucket cabin cannon cobra cotton crystal dagger denim eagle flute fossil
garlic ginger hornet jelly kayak lagoon lizard maple mermaid mitten muffin noodle orchid
otter pebble pigeon plum pony prism pumpkin quartz radish robin salmon sapphire sparrow
spider squid sundial tunnel valley vanilla waffle wagon willow
"""
UNSEEN_WORDS: tuple[str, ...] = tuple(_UNSEEN_TEXT.split())
_UNSEEN = frozenset(UNSEEN_WORDS)
"""Real words absent from the tokenizer corpus and from all training data (evaluation only)."""

_SYLLABLES = (*(a + b for a in "bdfgklmnprstvz" for b in "aeiou"), "an", "el", "or", "is")

QUESTION_STARTERS = (
    "What do you think about {w}?",
    "Tell me about {w}.",
    "Write a short sentence about {w}.",
    "Can you describe the {w}?",
    "Say something about {w}.",
    "Why is the {w} important?",
)

SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are a helpful assistant that answers in short sentences.",
    "Answer briefly.",
)


# ----- predicates: the ground truth of each family -------------------------------------------


def is_all_caps(text: str) -> bool:
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and all(c.isupper() for c in letters)


def mentions(text: str, word: str) -> bool:
    """Whole-word, case-insensitive: "PARIS." mentions paris, "parish" does not."""
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE) is not None


def word_count(text: str) -> int:
    return len(text.split())


def has_number(text: str) -> bool:
    return any(c.isdigit() for c in text)


def ends_with_question_mark(text: str) -> bool:
    return text.rstrip().endswith("?")


def _reject_constant(name: str) -> Any:
    raise InvalidInputError(f"{name} is not JSON")


def is_valid_json(text: str) -> bool:
    """Strict JSON: Python's parser also takes NaN and Infinity, which JSON does not."""
    try:
        json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return False
    return True


PREDICATES: dict[str, Callable[[str, dict[str, Any]], bool]] = {
    "all_caps": lambda text, _: is_all_caps(text),
    "mentions": lambda text, slots: mentions(text, slots["word"]),
    "max_words": lambda text, slots: word_count(text) <= slots["n"],
    "has_number": lambda text, _: has_number(text),
    "question": lambda text, _: ends_with_question_mark(text),
    "json": lambda text, _: is_valid_json(text),
}
"""``family -> predicate(response, slots)``: the label of every check example."""


def has_unseen_word(text: str) -> bool:
    return not _UNSEEN.isdisjoint(re.findall(r"[a-z]+", text.lower()))


def requirement_for(family: str, **slots: Any) -> str:
    """The requirement text of ``family`` with its free values filled in."""
    return PHRASINGS[family].format(**slots)


# ----- words and sentences ---------------------------------------------------------------------


def pseudo_word(rng: random.Random) -> str:
    """A made-up word of 2-3 syllables: adapter training sees words split into several
    tokens without ever seeing the real unseen words used in evaluation."""
    while True:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3)))
        if word not in _KNOWN:
            return word


_KNOWN = frozenset(WORDS) | frozenset(w.lower() for w in PLACES) | frozenset(UNSEEN_WORDS)


@dataclass
class WordSource:
    """Where response words come from: training words (plus made-up ones) or unseen ones."""

    vocab: Vocab = "train"
    pseudo_rate: float = 0.0

    def word(self, rng: random.Random) -> str:
        if self.vocab == "unseen" and rng.random() < 0.5:
            return rng.choice(UNSEEN_WORDS)
        if self.pseudo_rate and rng.random() < self.pseudo_rate:
            return pseudo_word(rng)
        if rng.random() < 0.1:
            return rng.choice(PLACES)
        return rng.choice(VOCAB)

    def words(self, rng: random.Random, k: int) -> list[str]:
        out = [self.word(rng) for _ in range(k)]
        if self.vocab == "unseen" and not any(w in UNSEEN_WORDS for w in out):
            out[rng.randrange(k)] = rng.choice(UNSEEN_WORDS)
        return out

    def topic(self, rng: random.Random) -> str:
        return rng.choice(UNSEEN_WORDS) if self.vocab == "unseen" else rng.choice(VOCAB)


def _number(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.55:
        return str(rng.randint(0, 999))
    if r < 0.75:
        return str(rng.randint(1000, 99999))
    if r < 0.9:
        return f"{rng.uniform(0, 100):.{rng.randint(1, 2)}f}"
    return str(-rng.randint(1, 500))


Case = Literal["lower", "sentence", "upper"]


def _cased(words: Sequence[str], case: Case) -> list[str]:
    if case == "upper":
        return [w.upper() for w in words]
    if case == "sentence" and words:
        return [words[0][:1].upper() + words[0][1:], *words[1:]]
    return list(words)


def _end(rng: random.Random, *, question: bool | None = None) -> str:
    if question is True:
        return "?"
    options = ("", ".", ".", "!") if question is False else ("", ".", ".", "!", "?")
    return rng.choice(options)


def _sentence(
    rng: random.Random, src: WordSource, k: int, *, case: Case | None = None,
    end: str | None = None, number: bool = False,
) -> str:
    words = src.words(rng, k)
    if number:
        words[rng.randrange(k)] = _number(rng)
    case = case or rng.choice(("lower", "sentence", "sentence", "upper"))
    text = " ".join(_cased(words, case))
    return text + (_end(rng) if end is None else end)


def _json_value(rng: random.Random, src: WordSource, *, numbers: bool, depth: int = 0) -> Any:
    r = rng.random()
    if r < 0.3 and numbers:
        return rng.randint(-20, 2000) if rng.random() < 0.8 else round(rng.uniform(0, 99), 1)
    if r < 0.65:
        return src.word(rng)
    if r < 0.75:
        return rng.choice([True, False, None])
    if r < 0.9 or depth:
        return " ".join(src.words(rng, rng.randint(2, 4)))
    return [_json_value(rng, src, numbers=numbers, depth=1) for _ in range(rng.randint(1, 3))]


def _json_text(rng: random.Random, src: WordSource, *, numbers: bool = True) -> str:
    r = rng.random()
    if r < 0.75:
        obj: Any = {src.word(rng): _json_value(rng, src, numbers=numbers)
                    for _ in range(rng.randint(1, 3))}
    elif r < 0.9:
        obj = [_json_value(rng, src, numbers=numbers) for _ in range(rng.randint(1, 4))]
    elif r < 0.95 or not numbers:
        obj = " ".join(src.words(rng, rng.randint(1, 3)))
    else:
        obj = rng.randint(0, 999)
    return json.dumps(obj)


def _break_json(rng: random.Random, text: str) -> str:
    """A near miss: valid JSON with one typical mistake (always invalid afterwards)."""
    for _ in range(20):
        kind = rng.randrange(6)
        if kind == 0:
            broken = text[:-1]  # truncated: the closing bracket or quote is missing
        elif kind == 1:
            broken = text.replace('"', "'")
        elif kind == 2 and text[-1:] in "}]":
            broken = text[:-1] + ", " + text[-1]  # trailing comma
        elif kind == 3 and text.startswith("{"):
            broken = re.sub(r'"(\w+)":', r"\1:", text, count=1)  # unquoted key
        elif kind == 4:
            broken = text.replace("true", "True").replace("false", "False").replace(
                "null", "None")
        else:
            broken = text.replace(": ", " ", 1) if ": " in text else text + "}"
        if broken != text and not is_valid_json(broken):
            return broken
    return text[:-1] + "{"


# ----- requirement-check examples ----------------------------------------------------------------


@dataclass
class CheckExample:
    """A conversation to check, the requirement, and whether its last response meets it."""

    family: str
    requirement: str
    messages: list[dict[str, Any]]
    label: bool
    slots: dict[str, Any] = field(default_factory=dict)

    @property
    def response(self) -> str:
        return str(self.messages[-1]["content"])


def _response_for(
    rng: random.Random, family: str, want: bool, src: WordSource
) -> tuple[str, dict[str, Any], str | None]:
    """``(response, slots, word to put in the question)`` aiming at label ``want``."""
    slots: dict[str, Any] = {}
    k = rng.randint(1, 12)
    if family == "all_caps":
        r = rng.random()
        if want:
            text = (_json_text(rng, src).upper() if r < 0.1
                    else _sentence(rng, src, k, case="upper", number=rng.random() < 0.2))
        elif r < 0.35 and k > 1:  # one word left in lower or sentence case
            words = [w.upper() for w in src.words(rng, k)]
            i = rng.randrange(k)
            words[i] = words[i].lower() if rng.random() < 0.5 else words[i].capitalize()
            text = " ".join(words) + _end(rng)
        else:
            text = _sentence(rng, src, k, case=rng.choice(("lower", "sentence")))
        return text, slots, None
    if family == "mentions":
        word = rng.choice(UNSEEN_WORDS) if src.vocab == "unseen" else (
            rng.choice(PLACES) if rng.random() < 0.3 else src.word(rng))
        slots["word"] = word
        words = src.words(rng, k)
        words = [w for w in words if not mentions(w, word)] or [src.topic(rng)]
        if want:
            words.insert(rng.randrange(len(words) + 1), word)
        text = " ".join(_cased(words, rng.choice(("lower", "sentence", "sentence", "upper"))))
        text += _end(rng)
        ask = word if (not want and rng.random() < 0.35) else None  # user says it, reply not
        return text, slots, ask
    if family == "max_words":
        n = rng.randint(1, MAX_WORDS_N)
        slots["n"] = n
        if rng.random() < 0.5:  # at the boundary
            count = rng.choice((n, n - 1)) if want else rng.choice((n + 1, n + 2))
        else:
            count = rng.randint(1, n) if want else rng.randint(n + 1, n + 8)
        count = max(count, 1)
        return _sentence(rng, src, count, number=rng.random() < 0.2), slots, None
    if family == "has_number":
        r = rng.random()
        if r < 0.15:
            text = (_json_text(rng, src, numbers=True) if want
                    else _json_text(rng, src, numbers=False))
            if want and not has_number(text):
                text = json.dumps({src.word(rng): rng.randint(0, 999)})
        elif r < 0.25 and want:
            text = _number(rng)
        else:
            text = _sentence(rng, src, k, number=want)
        return text, slots, None
    if family == "question":
        r = rng.random()
        if want:
            text = _sentence(rng, src, k, end="?")
        elif r < 0.3:  # a question first, then a statement
            first = _sentence(rng, src, rng.randint(1, 5), case="sentence", end="?")
            text = first + " " + _sentence(rng, src, k, case="sentence", end=rng.choice(".!"))
        else:
            text = _sentence(rng, src, k, end=rng.choice(("", ".", ".", "!")))
        return text, slots, None
    if family == "json":
        r = rng.random()
        if want:
            text = _json_text(rng, src)
        elif r < 0.4:
            text = _sentence(rng, src, k)
        else:
            text = _break_json(rng, _json_text(rng, src))
        return text, slots, None
    raise InvalidInputError(f"Unknown requirement family {family!r}; use one of {FAMILIES}.")


def _question(rng: random.Random, src: WordSource, word: str | None) -> str:
    return rng.choice(QUESTION_STARTERS).format(w=word or src.topic(rng))


def check_example(
    rng: random.Random, family: str, label: bool, *, vocab: Vocab = "train",
    pseudo_rate: float = 0.0,
) -> CheckExample:
    """One conversation whose last response meets ``family``'s requirement iff ``label``.

    The label is recomputed by the family's predicate; a draw that misses it (or, for
    ``vocab="unseen"``, holds no unseen word) is redrawn, so the returned label is always the
    predicate's verdict.
    """
    src = WordSource(vocab, pseudo_rate)
    for _ in range(100):
        response, slots, ask = _response_for(rng, family, label, src)
        if PREDICATES[family](response, slots) == label and (
                vocab == "train" or has_unseen_word(response)):
            break
    else:  # pragma: no cover - every family hits its label within a few draws
        raise EmbeddedModelError(f"could not draw a {family} example with label {label}")
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.15:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    if rng.random() < 0.1:
        messages += [{"role": "user", "content": _question(rng, src, None)},
                     {"role": "assistant", "content": _sentence(rng, src, rng.randint(2, 8))}]
    messages.append({"role": "user", "content": _question(rng, src, ask)})
    answer: dict[str, Any] = {"role": "assistant", "content": response}
    if rng.random() < 0.15:
        answer["reasoning_content"] = _sentence(rng, src, rng.randint(3, 8), case="sentence",
                                                end=".")
    messages.append(answer)
    return CheckExample(family, requirement_for(family, **slots), messages, label, slots)


def check_examples(
    rng: random.Random, n_per_family: int, *, vocab: Vocab = "train",
    pseudo_rate: float = 0.0, families: Sequence[str] = FAMILIES,
) -> list[CheckExample]:
    """``n_per_family`` examples of each family, half passing and half failing, shuffled."""
    out = [
        check_example(rng, family, i % 2 == 0, vocab=vocab, pseudo_rate=pseudo_rate)
        for family in families for i in range(n_per_family)
    ]
    rng.shuffle(out)
    return out


def check_user_turn(requirement: str) -> dict[str, str]:
    """The instruction turn as the io.yaml renders it (for readers of the data)."""
    return {"role": "user", "content": requirement_check_text(requirement)}


# ----- chats: short answers in varying forms ---------------------------------------------------
