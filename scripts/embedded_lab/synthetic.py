"""Seeded synthetic data for the embedded model: chats, requirement checks, ReACT traces.

Everything the shipped model and its adapters learn comes from here, drawn from a
``random.Random`` the caller seeds, so a training run is reproducible and an evaluation can use
fresh seeds for a held-out set from the same distribution.

- ``chat_example``: a short question and an answer whose *form* varies with an instruction
  (one word, all capitals, JSON, a question back), sometimes with ``<think>`` reasoning. The
  forms are what make requirement checks pass on some answers and fail on others.
- ``check_example``: a conversation, one of the six requirement phrasings and the label a real
  Python predicate (``PREDICATES``) computes on the last assistant turn's content. Drawn
  label-first, so every family is balanced, with the hard negatives a shortcut would miss
  (one lowercase word among capitals, a ``?`` mid-text, JSON with a trailing comma, the word
  mentioned by the user but not in the response, word counts at the boundary).
- ``self_check_example``: a drawn answer, a question about its form in words unlike the
  requirement texts, and the true "Yes."/"No.": the concepts the base must know.
- ``react_task`` / ``react_trace``: calculator and lookup tasks in exactly the message shape
  ``mellea_local.react`` renders (its initiator text and tool specs are used, not copied).

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


@dataclass
class ChatExample:
    """A conversation the base model is trained on (loss on the assistant turns)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    learned_turns: int = 0
    """Learn only the last this many assistant turns (0: all of them); the earlier ones are
    drawn data, not model behaviour."""


_FORMS = ("plain", "plain", "plain", "word", "caps", "json", "question")
_FORM_INSTRUCTIONS = {
    "word": " Answer in one word.",
    "caps": " Answer in all capital letters.",
    "json": " Answer in JSON.",
    "question": " Answer with a question.",
}


def _capital_qa(rng: random.Random, form: str) -> tuple[str, str, str]:
    country, capital = rng.choice(CAPITALS)
    question = rng.choice((
        f"What is the capital of {country}?",
        f"Which city is the capital of {country}?",
        f"Name the capital of {country}.",
    ))
    sentence = f"The capital of {country} is {capital}."
    answer = {
        "plain": sentence,
        "word": capital,
        "caps": sentence.upper(),
        "json": json.dumps({"country": country, "capital": capital}),
        "question": f"Is the capital of {country} {capital}?",
    }[form]
    thought = f"The user asks for the capital of {country}. The capital of {country} is {capital}."
    return question, answer, thought


def _sum_qa(rng: random.Random, form: str) -> tuple[str, str, str]:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    question = rng.choice((f"What is {a} + {b}?", f"How much is {a} plus {b}?"))
    answer = {
        "plain": f"{a} + {b} = {a + b}.",
        "word": str(a + b),
        "caps": f"{a} PLUS {b} IS {a + b}.",
        "json": json.dumps({"answer": a + b}),
        "question": f"Is it {a + b}?",
    }[form]
    return question, answer, f"I add {a} and {b}. {a} + {b} = {a + b}."


def _copy_text(rng: random.Random) -> str:
    """Something to repeat: words, numbers, an expression or a key (copying is what ReACT
    needs most: arguments come from the goal and answers from tool results)."""
    r = rng.random()
    if r < 0.4:
        return " ".join(rng.choice(VOCAB) for _ in range(rng.randint(2, 8)))
    if r < 0.6:
        return " ".join(_number(rng) for _ in range(rng.randint(1, 3)))
    if r < 0.8:
        return _expression(rng)
    return f"{rng.choice(VOCAB)}_{rng.choice(VOCAB)}" if r < 0.9 else rng.choice(PLACES)


def _is_copy(question: str) -> bool:
    return question.startswith(("Repeat after me:", "Say:", "Copy this:"))


def _repeat_qa(rng: random.Random, form: str) -> tuple[str, str, str]:
    text = _copy_text(rng)
    # Quoted, the text is spelled with the same tokens in the question and the answer (no
    # leading-space variants), so plain copying reproduces it.
    question = rng.choice(('Repeat after me: "{x}"', 'Say: "{x}"', 'Copy this: "{x}"')).format(
        x=text)
    answer = {"word": text.split()[0], "json": json.dumps({"text": text})}.get(form, text)
    return question, answer, "The user wants me to repeat the words."


def _json_qa(rng: random.Random, form: str) -> tuple[str, str, str]:
    key, value = rng.choice(VOCAB), rng.choice(VOCAB + PLACES)
    question = f"Give me a JSON object with the key {key} and the value {value}."
    answer = json.dumps({key: value})
    if form == "caps":
        answer = answer.upper()
    return question, answer, f"The object has one key, {key}, with the value {value}."


def _about_qa(rng: random.Random, form: str) -> tuple[str, str, str]:
    topic = rng.choice(VOCAB)
    question = rng.choice(QUESTION_STARTERS).format(w=topic)
    words = [rng.choice(VOCAB) for _ in range(rng.randint(2, 9))]
    words.insert(rng.randrange(len(words) + 1), topic)
    text = " ".join(words)
    answer = {
        "plain": text[:1].upper() + text[1:] + ".",
        "word": topic,
        "caps": text.upper() + ".",
        "json": json.dumps({"topic": topic, "text": text}),
        "question": text[:1].upper() + text[1:] + "?",
    }[form]
    return question, answer, f"The user asks about {topic}."


_QA = (_capital_qa, _capital_qa, _capital_qa, _sum_qa, _repeat_qa, _repeat_qa, _repeat_qa,
       _json_qa, _about_qa)


def chat_example(rng: random.Random, *, thinking_rate: float = 0.3) -> ChatExample:
    """A short question with an answer in one of several forms; some with reasoning."""
    form, qa = rng.choice(_FORMS), rng.choice(_QA)
    if qa is _repeat_qa and form in ("caps", "question"):
        form = "plain"  # repeating is verbatim: no casing or punctuation of its own
    question, answer, thought = qa(rng, form)
    if form != "plain" and rng.random() < 0.8:
        instruction = _FORM_INSTRUCTIONS[form]
        # After text to repeat, the instruction would read as part of it: put it first.
        question = (instruction.strip() + " " + question if _is_copy(question)
                    else question + instruction)
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    if rng.random() < 0.2:
        q0, a0, _ = rng.choice(_QA)(rng, "plain")
        messages += [{"role": "user", "content": q0}, {"role": "assistant", "content": a0}]
    messages.append({"role": "user", "content": question})
    turn: dict[str, Any] = {"role": "assistant", "content": answer}
    if rng.random() < thinking_rate:
        turn["reasoning_content"] = thought
    messages.append(turn)
    return ChatExample(messages)


def _chat_slots(
    rng: random.Random, family: str, label: bool, messages: list[dict[str, Any]]
) -> dict[str, Any]:
    """Slots for checking ``messages``' last answer against ``family``, aiming at ``label``.

    A "mentions" negative names a word of the question or the thinking half the time: the
    near miss a chat offers and a bag of words does not (the check must read the answer, not
    the whole conversation)."""
    response = str(messages[-1]["content"])
    if family == "mentions":
        if label:
            said = re.findall(r"[A-Za-z]+", response)
            word = rng.choice([w for w in said if len(w) > 2] or said or ["none"])
        else:
            around = " ".join(f"{m.get('content', '')} {m.get('reasoning_content', '')}"
                              for m in messages)
            near = [w for w in re.findall(r"[A-Za-z]{3,}", around)
                    if not mentions(response, w)]
            word = rng.choice(near) if near and rng.random() < 0.5 else (
                rng.choice(PLACES) if rng.random() < 0.2 else rng.choice(VOCAB))
        return {"word": word if word in PLACES else word.lower()}
    if family == "max_words":
        count = word_count(response)
        n = count + rng.choice((0, 0, 1, 2)) if label else count - rng.choice((1, 1, 2, 3))
        return {"n": max(1, min(MAX_WORDS_N, n))}
    return {}


def chat_check_example(rng: random.Random, family: str, label: bool) -> CheckExample:
    """A check on an answer of the kind the base writes (``chat_example``), not a bag of
    words: capitals, sums, repeated text, JSON, some with thinking. Redrawn until the
    family's predicate gives ``label``."""
    for _ in range(500):
        messages = chat_example(rng).messages
        slots = _chat_slots(rng, family, label, messages)
        if PREDICATES[family](str(messages[-1]["content"]), slots) == label:
            return CheckExample(family, requirement_for(family, **slots), messages, label, slots)
    raise EmbeddedModelError(  # pragma: no cover - every family hits its label within a few draws
        f"could not draw a chat answer for {family} with label {label}")


def chat_check_examples(rng: random.Random, n_per_family: int) -> list[CheckExample]:
    """``n_per_family`` chat-answer checks per family, half passing, shuffled."""
    out = [chat_check_example(rng, family, i % 2 == 0)
           for family in FAMILIES for i in range(n_per_family)]
    rng.shuffle(out)
    return out


# ----- self-checks: the base learns to see the form of its answers ----------------------------

# Phrased unlike the requirement texts: the base learns the concepts, the adapters the intrinsic.
SELF_CHECK_QUESTIONS = {
    "all_caps": ("Was your answer in capital letters only?", "Did you write only in capitals?"),
    "mentions": ("Did you say {word}?", "Does your answer have the word {word}?"),
    "max_words": ("Did you use {n} words or fewer?", "Was your answer {n} words or shorter?"),
    "has_number": ("Is there a digit in your answer?", "Did your answer use any digits?"),
    "question": ("Did your answer end with a question mark?", "Did you end with a question?"),
    "json": ("Was your answer valid JSON?", "Can your answer be parsed as JSON?"),
}


def self_check_example(rng: random.Random, questions: int = 1) -> ChatExample:
    """A drawn answer, questions about its form, and the true "Yes."/"No." to each.

    A real base model knows what capitals, digits or JSON are before an adapter is trained on
    it; this gives the tiny base that knowledge, so the features the checks need exist in the
    key/value states of the answer (an aLoRA reads those states, it cannot change them).
    With ``questions`` > 1 the answer is asked about that many families, one turn each: the
    conversation is paid for once and yields that many labels.
    """
    family = rng.choice(FAMILIES)
    example = check_example(rng, family, rng.random() < 0.5, pseudo_rate=0.1)
    question = rng.choice(SELF_CHECK_QUESTIONS[family]).format(**example.slots)
    messages = [*example.messages, {"role": "user", "content": question},
                {"role": "assistant", "content": "Yes." if example.label else "No."}]
    others = rng.sample([f for f in FAMILIES if f != family], questions - 1)
    for other in others:
        slots = _slots_about(rng, other, example.response)
        label = PREDICATES[other](example.response, slots)
        messages += [
            {"role": "user", "content": rng.choice(SELF_CHECK_QUESTIONS[other]).format(**slots)},
            {"role": "assistant", "content": "Yes." if label else "No."}]
    return ChatExample(messages, learned_turns=questions)


def word_echo_example(rng: random.Random) -> ChatExample:
    """An answer, then "Which of these words did you say: ...?" and the ones it did say.

    Practice at looking a word up in an answer whatever its case, the concept "mentions"
    checks need and the one sparse Yes/No self-checks never taught: each listed word is from
    the answer half the time, cased anew, so the feature probe
    (``feature_targets``, ``mentioned``) gets a balanced label on every one of them. (Not
    enough alone: a base trained without ``mention_drill`` listed some of the words, right or
    wrong, 1 of 30 exact.)
    """
    src = WordSource("train", 0.1)
    answer = _sentence(rng, src, rng.randint(3, 12))
    said = list(dict.fromkeys(w.lower() for w in re.findall(r"[A-Za-z]+", answer)))
    asked: list[str] = []
    for _ in range(rng.randint(2, 5)):
        if said and rng.random() < 0.5:
            word = said.pop(rng.randrange(len(said)))
        else:
            word = src.word(rng).lower()
            if mentions(answer, word) or word in asked:
                continue
        asked.append(word)
    shown = [w.capitalize() if rng.random() < 0.15 else w.upper() if rng.random() < 0.1 else w
             for w in asked]
    found = [w for w in asked if mentions(answer, w)] or ["None"]
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.15:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    messages += [
        {"role": "user", "content": _question(rng, src, None)},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Which of these words did you say: " + ", ".join(shown) + "?"},
        {"role": "assistant", "content": ", ".join(found) + "."},
    ]
    return ChatExample(messages, learned_turns=1)


def mention_drill(rng: random.Random, place_rate: float = 0.0) -> ChatExample:
    """Training words in random case, then a user turn of words half of which the answer said.

    Rows for the feature probe alone (the trainer learns none of their tokens): every word of
    the last turn gets a balanced "mentioned" label, each word cased anew so the match must go
    through the word's identity, not its tokens. Continuing a base trained without them on
    these (every other step, 1500 steps) made "mentioned" at a check's requirement word
    linearly decodable from layer 2 on (a fresh probe: 61-67 % before, 85 % after); in the
    shipped recipe (``mention_batch``) they took aLoRA "mentions" from 52.5 to 96 % (issue 5
    notes). Half the drills are mostly in capitals: the answer's running word count and
    "all capitals so far" are probe targets too, and capitals with one other word are where
    the all_caps and max_words checks failed (aLoRA all_caps 91 -> 99.5 %).
    """

    shout = rng.random() < 0.5  # mostly capitals: one other word is what all_caps misses

    def cased(word: str) -> str:
        if shout and rng.random() < 0.8:
            return word.upper()
        r = rng.random()
        return word if r < 0.4 else word.capitalize() if r < 0.7 else word.upper()

    def word() -> str:
        return rng.choice(PLACES) if place_rate and rng.random() < place_rate else rng.choice(VOCAB)

    said = (rng.sample(VOCAB, rng.randint(3, 10)) if not place_rate
            else list(dict.fromkeys(word() for _ in range(rng.randint(3, 10)))))
    asked = [rng.choice(said) if rng.random() < 0.5 else word()
             for _ in range(rng.randint(3, 8))]
    messages = [
        {"role": "user", "content": _question(rng, WordSource("train", 0.0), None)},
        {"role": "assistant", "content": " ".join(map(cased, said)) + rng.choice((".", "", "!"))},
        {"role": "user", "content": " ".join(map(cased, asked)) + "?"},
    ]
    return ChatExample(messages)


def _slots_about(rng: random.Random, family: str, response: str) -> dict[str, Any]:
    """Question slots for a response drawn for another family, half of them true."""
    if family == "mentions":
        words = re.findall(r"[A-Za-z]+", response)
        if words and rng.random() < 0.5:
            return {"word": rng.choice(words).lower()}
        while True:
            word = rng.choice(PLACES) if rng.random() < 0.2 else rng.choice(VOCAB)
            if not mentions(response, word):
                return {"word": word}
    if family == "max_words":
        count = word_count(response) + rng.choice((-2, -1, -1, 0, 0, 1, 2))
        return {"n": max(1, min(MAX_WORDS_N, count))}
    return {}


# ----- ReACT: calculator and lookup tasks -----------------------------------------------------


@dataclass
class ReactTask:
    """A goal, the tools it offers, and the answer the tools lead to."""

    goal: str
    tool: Literal["calculator", "lookup"]
    argument: str
    answer: str
    table: dict[str, str] = field(default_factory=dict)
    offered: tuple[str, ...] = ("calculator", "lookup")


def _expression(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.7:
        a, b = rng.randint(0, 999), rng.randint(0, 999 if rng.random() < 0.5 else 99)
        return f"{a} {rng.choice('+-*')} {b}"
    if r < 0.85:
        a, b, c = (rng.randint(0, 99) for _ in range(3))
        return f"{a} {rng.choice('+-*')} {b} {rng.choice('+-')} {c}"
    a, b, c = (rng.randint(0, 99) for _ in range(3))
    return f"({a} {rng.choice('+-')} {b}) * {c}"


def _key(rng: random.Random, vocab: Vocab, pseudo_rate: float = 0.0) -> str:
    pool = UNSEEN_WORDS if vocab == "unseen" else VOCAB

    def word() -> str:
        return pseudo_word(rng) if pseudo_rate and rng.random() < pseudo_rate else rng.choice(pool)

    r = rng.random()
    if r < 0.6:
        return word()
    if r < 0.8:
        return f"{word()}_{word()}"
    return rng.choice(PLACES).lower().replace(" ", "_")


def _value(rng: random.Random, vocab: Vocab, pseudo_rate: float = 0.0) -> str:
    r = rng.random()
    if r < 0.4:
        return str(rng.randint(0, 9999))
    if r < 0.7:
        return rng.choice(PLACES)
    if pseudo_rate and rng.random() < pseudo_rate:
        return pseudo_word(rng)
    return rng.choice(UNSEEN_WORDS if vocab == "unseen" else VOCAB)


_CALC_GOALS = ("What is {x}?", "Compute {x}.", "Calculate {x}.", "How much is {x}?",
               "Use the calculator to find {x}.")
# Keys are quoted in goals: then the key has the same tokens in the goal and in the call's JSON.
_LOOKUP_GOALS = ('Look up "{x}".', 'What is the value of "{x}"?',
                 'Find the value stored under "{x}".', 'What is stored under the key "{x}"?',
                 'Look up the key "{x}" and tell me its value.')


def react_task(
    rng: random.Random, *, kind: str | None = None, vocab: Vocab = "train",
    pseudo_rate: float = 0.0,
) -> ReactTask:
    """A calculator or lookup task (``kind``), with the tools offered drawn too.

    ``pseudo_rate``: how often a word of a key or value is made up. Keys and values built only
    from training words teach the model to copy those words' tokens; made-up ones teach it to
    copy whatever tokens they have, which is what unseen keys and values need.
    """
    from mellea_local.tools.builtin import evaluate_integer_expression

    kind = kind or rng.choice(("calculator", "lookup"))
    if kind == "calculator":
        expression = _expression(rng)
        goal = rng.choice(_CALC_GOALS).format(x=expression)
        answer = str(evaluate_integer_expression(expression))
        offered = rng.choice((("calculator", "lookup"), ("lookup", "calculator"), ("calculator",)))
        return ReactTask(goal, "calculator", expression, answer, {}, offered)
    key = _key(rng, vocab, pseudo_rate)
    table = {key: _value(rng, vocab, pseudo_rate)}
    while len(table) < rng.randint(1, 4):
        table[_key(rng, vocab, pseudo_rate)] = _value(rng, vocab, pseudo_rate)
    goal = rng.choice(_LOOKUP_GOALS).format(x=key)
    offered = rng.choice((("calculator", "lookup"), ("lookup", "calculator"), ("lookup",)))
    return ReactTask(goal, "lookup", key, table[key], table, offered)


def react_tools(task: ReactTask) -> list[Any]:
    """The real tools for ``task`` in the order offered (``react`` adds ``final_answer``)."""
    from mellea_local.tools import calculator, lookup_tool

    made = {"calculator": calculator, "lookup": lookup_tool(task.table)}
    return [made[name] for name in task.offered]


def react_trace(rng: random.Random, task: ReactTask, *, thinking: bool = False) -> ChatExample:
    """The conversation ``react`` has when the model solves ``task`` in two turns.

    The user turns, the tool specs and the tool results come from the real react components
    and tools, so training sees exactly what inference renders.
    """
    from mellea_local.react.components import ReactInitiator, ReactThought
    from mellea_local.rendering.chat import component_text
    from mellea_local.tools.tool import observation_text

    initiator = ReactInitiator(task.goal, react_tools(task))
    tools = [tool.as_json_tool for tool in initiator.tool_map.values()]
    argument = {"expression" if task.tool == "calculator" else "key": task.argument}
    output = initiator.tool_map[task.tool].run(**argument)
    first: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [
        _call(task.tool, argument)]}
    final: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [
        _call("final_answer", {"answer": task.answer})]}
    if thinking:
        first["reasoning_content"] = (
            f"I need to compute {task.argument}. I will call the calculator."
            if task.tool == "calculator"
            else f"I need the value stored under {task.argument}. I will call lookup.")
        final["reasoning_content"] = f"The tool says {observation_text(output)}. I have the answer."
    messages = [
        {"role": "user", "content": component_text(initiator)},
        first,
        {"role": "tool", "content": observation_text(output), "name": task.tool},
        {"role": "user", "content": component_text(ReactThought())},
        final,
    ]
    return ChatExample(messages, tools)


def _call(name: str, arguments: dict[str, str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}
