"""Seeded synthetic training data for the embedded model: chats, self-checks, ReACT traces.

The training lab, beside ``scripts/train_embedded.py`` and not in the wheel. Everything the
shipped model and its adapters learn comes from here and from the requirement-check families
of ``mellea_local.embedded.checks`` (re-exported below, so ``S.check_examples`` and friends read
as before), drawn from a ``random.Random`` the caller seeds: a training run is reproducible
and an evaluation can use fresh seeds for a held-out set from the same distribution.

- ``chat_example``: a short question and an answer whose *form* varies with an instruction
  (one word, all capitals, JSON, a question back), sometimes with ``<think>`` reasoning. The
  forms are what make requirement checks pass on some answers and fail on others.
- ``self_check_example``: a drawn answer, a question about its form in words unlike the
  requirement texts, and the true "Yes."/"No.": the concepts the base must know.
- ``react_task`` / ``react_trace``: calculator and lookup tasks in exactly the message shape
  ``mellea_local.react`` renders (its initiator text and tool specs are used, not copied).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any, Literal

# The requirement-check families (checks.__all__), re-exported: the lab reads them as S.*.
from mellea_local.embedded.checks import *  # noqa: F403
from mellea_local.embedded.checks import (
    CAPITALS,
    FAMILIES,
    MAX_WORDS_N,
    PLACES,
    PREDICATES,
    QUESTION_STARTERS,
    SYSTEM_PROMPTS,
    UNSEEN_WORDS,
    VOCAB,
    CheckExample,
    Vocab,
    WordSource,
    _number,
    _question,
    _sentence,
    check_example,
    mentions,
    pseudo_word,
    requirement_for,
    word_count,
)
from mellea_local.errors import EmbeddedModelError


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
