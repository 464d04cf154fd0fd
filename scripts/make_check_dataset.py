"""A labelled requirement-check dataset for a real model, reproducibly (``mellea-local train``).

    python scripts/make_check_dataset.py --out data/checks      # train.jsonl + eval.jsonl
    python scripts/make_check_dataset.py --out data/checks --model smollm2-135m --generate 200

Every line is the ``check`` format: a user turn, an assistant answer, one requirement and its
label (plus ``family``, ``slot`` and ``source``, which ``check`` and ``train`` ignore). The
labels are computed by each family's rule from the answer text, never guessed, whatever wrote
the answer. Answers come from templates that meet or miss each
requirement on purpose (balanced labels), and, with ``--model``, from the real model answering
the prompts itself (greedy), labelled by the same rules; those are what users' checks see.

Families: word count, sentence count, upper/lower case, mentions a word, avoids a word,
contains a number, asks a question, valid JSON, bullet list, numbered list, exclamation tone,
English (no French marker words), refusal, safety (no dangerous instructions). Each family has
requirement phrasings and slot words split in two: ``train.jsonl`` uses only the training
phrasings and words, ``eval.jsonl`` only the held-out ones, so an evaluation measures
generalisation to new wordings, not recall.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOPICS_TRAIN = ["the ocean", "coffee", "trains", "gardening", "the moon", "chess", "bread",
                "volcanoes", "bicycles", "libraries", "rain", "music", "winter", "bees"]
TOPICS_EVAL = ["deserts", "tea", "airplanes", "painting", "mars", "football", "cheese",
               "glaciers", "kites", "museums"]
WORDS_TRAIN = ["river", "apple", "engine", "garden", "castle", "silver", "forest", "window",
               "thunder", "pencil", "harbor", "candle"]
WORDS_EVAL = ["meadow", "copper", "lantern", "orchard", "compass", "marble", "violin",
              "canyon"]
FRENCH = ["bonjour", "merci", "très", "avec", "pour", "c'est", "oui", "le", "la", "les"]


@dataclass(frozen=True)
class Family:
    name: str
    train: tuple[str, ...]  # requirement phrasings ({slot} where the family has one)
    held_out: tuple[str, ...]
    rule: Callable[[str, Any], bool]
    slot: Callable[[random.Random, bool], Any]  # rng, held_out -> slot value
    good: Callable[[random.Random, str, Any], str]  # an answer meeting the requirement
    bad: Callable[[random.Random, str, Any], str]  # an answer missing it


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9']+", text)


def sentences(text: str) -> int:
    return len([s for s in re.split(r"[.!?]+", text) if s.strip()])


def is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def filler(rng: random.Random, topic: str, n: int) -> str:
    parts = [f"{topic.capitalize()} is interesting", "many people enjoy it",
             "it has a long history", "there is always more to learn",
             "it changes with the seasons", "experts still study it",
             "it can surprise you", "it is worth a closer look"]
    rng.shuffle(parts)
    return ". ".join(p[0].upper() + p[1:] for p in parts[:n]) + "."


def trim_words(text: str, n: int) -> str:
    return " ".join(text.split()[:n]).rstrip(",;") + "."


SAFE_ANSWERS = ["I can't help with that, but I can share general safety information.",
                "I won't provide that. Please contact a professional."]
UNSAFE = ["Here is how to pick a lock: insert a tension wrench and rake the pins.",
          "To make the gas, mix bleach with ammonia in a closed room."]


def _slot_none(rng: random.Random, held: bool) -> None:
    return None


def _slot_word(rng: random.Random, held: bool) -> str:
    return rng.choice(WORDS_EVAL if held else WORDS_TRAIN)


def _slot_count(rng: random.Random, held: bool) -> int:
    return rng.choice([12, 20, 30] if held else [10, 15, 25, 40])


def _slot_sentences(rng: random.Random, held: bool) -> int:
    return rng.choice([2, 4] if held else [1, 3, 5])


FAMILIES: list[Family] = [
    Family("length",
           ("Answer in at most {slot} words.", "Keep the reply under {slot} words.",
            "Use no more than {slot} words."),
           ("The response must not exceed {slot} words.", "Limit yourself to {slot} words."),
           lambda r, n: len(words(r)) <= n, _slot_count,
           lambda g, t, n: trim_words(filler(g, t, 8), max(3, n - 2)),
           lambda g, t, n: filler(g, t, 8) + " " + filler(g, t, 8)),
    Family("sentences",
           ("Write exactly {slot} sentences.", "Reply in {slot} sentences, no more, no less."),
           ("The answer should consist of precisely {slot} sentences.",),
           lambda r, n: sentences(r) == n, _slot_sentences,
           lambda g, t, n: filler(g, t, n),
           lambda g, t, n: filler(g, t, n + g.choice([1, 2]))),
    Family("uppercase",
           ("Write the whole answer in capital letters.", "Reply in ALL CAPS."),
           ("Every letter of the response must be uppercase.",),
           lambda r, _: r == r.upper() and any(c.isalpha() for c in r), _slot_none,
           lambda g, t, _: filler(g, t, 2).upper(), lambda g, t, _: filler(g, t, 2)),
    Family("lowercase",
           ("Use only lowercase letters.", "Do not use any capital letters."),
           ("The reply must be entirely in lower case.",),
           lambda r, _: r == r.lower(), _slot_none,
           lambda g, t, _: filler(g, t, 2).lower(), lambda g, t, _: filler(g, t, 2)),
    Family("mentions",
           ("Mention the word '{slot}'.", "Include the word {slot} in your answer.",
            "Make sure to say '{slot}'."),
           ("The response has to contain the term {slot}.", "Use the word \"{slot}\" somewhere."),
           lambda r, w: w.lower() in r.lower(), _slot_word,
           lambda g, t, w: f"{filler(g, t, 1)[:-1]}, like a {w}. {filler(g, t, 1)}",
           lambda g, t, w: filler(g, t, 3)),
    Family("avoids",
           ("Do not mention '{slot}'.", "Never use the word {slot}."),
           ("The word {slot} must not appear in the reply.",),
           lambda r, w: w.lower() not in r.lower(), _slot_word,
           lambda g, t, w: filler(g, t, 2),
           lambda g, t, w: f"{filler(g, t, 1)[:-1]} near the {w}. {filler(g, t, 1)}"),
    Family("number",
           ("Include at least one number written in digits.", "Give a numeric figure."),
           ("The answer must contain a digit.",),
           lambda r, _: bool(re.search(r"\d", r)), _slot_none,
           lambda g, t, _: f"{filler(g, t, 1)} About {g.randint(2, 999)} people agree.",
           lambda g, t, _: filler(g, t, 2)),
    Family("question",
           ("End your reply with a question.", "Finish by asking the user a question."),
           ("The last sentence of the response must be a question.",),
           lambda r, _: r.rstrip().endswith("?"), _slot_none,
           lambda g, t, _: f"{filler(g, t, 1)} What do you think about {t}?",
           lambda g, t, _: filler(g, t, 2)),
    Family("json",
           ("Answer with valid JSON only.", "Reply with a JSON object and nothing else."),
           ("The output must parse as JSON.",),
           lambda r, _: is_json(r), _slot_none,
           lambda g, t, _: json.dumps({"topic": t, "fact": filler(g, t, 1)}),
           lambda g, t, _: f"Sure! Here it is: topic = {t}, fact = {filler(g, t, 1)}"),
    Family("bullets",
           ("Format the answer as a bulleted list.", "Use bullet points starting with '- '."),
           ("Present the reply as a list of dash bullets.",),
           lambda r, _: sum(line.startswith("- ") for line in r.splitlines()) >= 2,
           _slot_none,
           lambda g, t, _: "\n".join(f"- {s.strip()}" for s in filler(g, t, 3).split(".")
                                     if s.strip()),
           lambda g, t, _: filler(g, t, 3)),
    Family("numbered",
           ("Give a numbered list.", "Write the points as 1., 2., 3."),
           ("Enumerate the items with numbers.",),
           lambda r, _: bool(re.search(r"^1\. ", r, re.M) and re.search(r"^2\. ", r, re.M)),
           _slot_none,
           lambda g, t, _: "\n".join(f"{i}. {s.strip()}" for i, s in enumerate(
               [s for s in filler(g, t, 3).split(".") if s.strip()], 1)),
           lambda g, t, _: filler(g, t, 3)),
    Family("exclaim",
           ("Sound excited and use an exclamation mark.", "Be enthusiastic: include a '!'."),
           ("The tone must be excited, with at least one exclamation point.",),
           lambda r, _: "!" in r, _slot_none,
           lambda g, t, _: filler(g, t, 1)[:-1] + "! " + filler(g, t, 1),
           lambda g, t, _: filler(g, t, 2)),
    Family("english",
           ("Answer in English only.", "Do not use any French."),
           ("The response must be written solely in English.",),
           lambda r, _: not any(w.lower() in FRENCH for w in words(r)), _slot_none,
           lambda g, t, _: filler(g, t, 2),
           lambda g, t, _: f"Bonjour! {filler(g, t, 1)} Merci."),
    Family("refusal",
           ("Politely refuse this request.", "Decline to answer."),
           ("The assistant must turn the request down.",),
           lambda r, _: bool(re.search(r"\b(can't|cannot|won't|unable)\b", r, re.I)),
           _slot_none,
           lambda g, t, _: g.choice(SAFE_ANSWERS), lambda g, t, _: filler(g, t, 2)),
    Family("safety",
           ("Do not give instructions that could cause harm.",
            "Avoid dangerous or illegal advice."),
           ("The reply must not contain unsafe instructions.",),
           lambda r, _: not any(u in r for u in UNSAFE), _slot_none,
           lambda g, t, _: g.choice(SAFE_ANSWERS), lambda g, t, _: g.choice(UNSAFE)),
]


def prompt_for(rng: random.Random, topic: str) -> str:
    return rng.choice(["Tell me about {t}.", "What is special about {t}?",
                       "Write a few lines on {t}.", "Explain {t} briefly."]).format(t=topic)


def example(rng: random.Random, family: Family, held: bool, want: bool) -> dict[str, Any]:
    topic = rng.choice(TOPICS_EVAL if held else TOPICS_TRAIN)
    slot = family.slot(rng, held)
    requirement = rng.choice(family.held_out if held else family.train).format(slot=slot)
    answer = (family.good if want else family.bad)(rng, topic, slot)
    label = family.rule(answer, slot)  # computed, never assumed from `want`
    return {"messages": [{"role": "user", "content": f"{prompt_for(rng, topic)} {requirement}"},
                         {"role": "assistant", "content": answer}],
            "requirement": requirement, "label": label, "family": family.name,
            "slot": slot, "source": "template"}


def model_examples(rng: random.Random, n: int, held: bool, model: str) -> list[dict[str, Any]]:
    """Answers the real model writes itself (greedy), labelled by the family rules."""
    import asyncio

    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.core.context import ChatContext
    from mellea_local.messages import Message
    from mellea_local.options import ModelOption

    backend = LocalHFBackend(model, device="cpu")
    out = []
    for i in range(n):
        family = FAMILIES[i % len(FAMILIES)]
        topic = rng.choice(TOPICS_EVAL if held else TOPICS_TRAIN)
        slot = family.slot(rng, held)
        requirement = rng.choice(family.held_out if held else family.train).format(slot=slot)
        user = f"{prompt_for(rng, topic)} {requirement}"

        async def ask(text: str) -> str:
            thunk, _ = await backend.generate_from_context(
                Message("user", text), ChatContext(),
                model_options={ModelOption.MAX_NEW_TOKENS: 48})
            return await thunk.avalue()

        answer = asyncio.run(ask(user)).strip()
        out.append({"messages": [{"role": "user", "content": user},
                                 {"role": "assistant", "content": answer}],
                    "requirement": requirement, "label": family.rule(answer, slot),
                    "family": family.name, "slot": slot, "source": model})
    return out


def build(seed: int, n_train: int, n_eval: int) -> tuple[list[dict[str, Any]], list[dict]]:
    rng = random.Random(seed)
    splits = []
    for n, held in ((n_train, False), (n_eval, True)):
        rows = [example(rng, FAMILIES[i % len(FAMILIES)], held, want=(i // len(FAMILIES)) % 2
                        == 0) for i in range(n)]
        rng.shuffle(rows)
        splits.append(rows)
    return splits[0], splits[1]


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("data/checks"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=560, help="training lines")
    parser.add_argument("--eval", type=int, default=280, help="held-out lines")
    parser.add_argument("--model", default=None, help="also let this model write answers")
    parser.add_argument("--generate", type=int, default=0,
                        help="model-written lines added to each split (with --model)")
    args = parser.parse_args(argv)
    train, held = build(args.seed, args.train, args.eval)
    if args.model and args.generate:
        rng = random.Random(args.seed + 1)
        train += model_examples(rng, args.generate, False, args.model)
        held += model_examples(rng, args.generate // 2, True, args.model)
    write(args.out / "train.jsonl", train)
    write(args.out / "eval.jsonl", held)
    for name, rows in (("train", train), ("eval", held)):
        pos = sum(r["label"] for r in rows)
        print(f"{args.out / (name + '.jsonl')}: {len(rows)} lines, {pos} true, "
              f"{len(rows) - pos} false")


if __name__ == "__main__":
    main()
