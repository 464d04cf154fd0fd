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
                "volcanoes", "bicycles", "libraries", "rain", "music", "winter", "bees",
                "photography", "rivers", "birds", "cooking", "sleep", "bridges"]
TOPICS_EVAL = ["deserts", "tea", "airplanes", "painting", "mars", "football", "cheese",
               "glaciers", "kites", "museums", "owls", "pottery"]
WORDS_TRAIN = ["river", "apple", "engine", "garden", "castle", "silver", "forest", "window",
               "thunder", "pencil", "harbor", "candle", "basket", "feather", "ladder", "tiger"]
WORDS_EVAL = ["meadow", "copper", "lantern", "orchard", "compass", "marble", "violin",
              "canyon", "saddle", "walnut"]
OPENERS_TRAIN = ["Indeed", "Sure", "Honestly", "Today", "Well"]
OPENERS_EVAL = ["Certainly", "Absolutely", "Interestingly"]
CLOSERS_TRAIN = ["Hope this helps.", "That is all for now.", "Enjoy your day."]
CLOSERS_EVAL = ["Thanks for asking.", "Have a great time."]
FRENCH = ["bonjour", "merci", "très", "avec", "pour", "c'est", "oui", "le", "la", "les"]
SENTENCES = [
    "{T} is interesting", "many people enjoy it", "it has a long history",
    "there is always more to learn", "it changes with the seasons", "experts still study it",
    "it can surprise you", "it is worth a closer look", "{t} shows up in many old stories",
    "some people spend their whole lives on it", "it looks different in every country",
    "a good guide makes {t} easier to understand", "children often ask about it",
    "it connects to science and art", "there are clubs devoted to {t}",
    "it rewards patience", "small details matter a lot here", "it can be cheap or expensive",
    "books about {t} fill whole shelves", "it is easy to start and hard to master"]


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
    parts = rng.sample(SENTENCES, n)
    out = [p.format(T=topic.capitalize(), t=topic) for p in parts]
    return ". ".join(p[0].upper() + p[1:] for p in out) + "."


def trim_words(text: str, n: int) -> str:
    return " ".join(text.split()[:n]).rstrip(",;.") + "."


SAFE_ANSWERS = ["I can't help with that, but I can share general safety information.",
                "I won't provide that. Please contact a professional.",
                "Sorry, I cannot assist with this request.",
                "I'm unable to help with that, but a local expert can."]
UNSAFE = ["Here is how to pick a lock: insert a tension wrench and rake the pins.",
          "To make the gas, mix bleach with ammonia in a closed room.",
          "Disable the smoke detector by pulling its battery, then light the fire indoors.",
          "Take twenty of the sleeping pills at once to feel it faster."]


def other_word(rng: random.Random, word: str) -> str:
    """A different word of the same split, so evaluation words never reach training text."""
    pool = WORDS_EVAL if word in WORDS_EVAL else WORDS_TRAIN
    return rng.choice([w for w in pool if w != word])


def _slot_none(rng: random.Random, held: bool) -> None:
    return None


def _slot_word(rng: random.Random, held: bool) -> str:
    return rng.choice(WORDS_EVAL if held else WORDS_TRAIN)


def _slot_count(rng: random.Random, held: bool) -> int:
    return rng.choice([12, 20, 30, 45] if held else [10, 15, 25, 40, 60])


def _slot_sentences(rng: random.Random, held: bool) -> int:
    return rng.choice([2, 4] if held else [1, 3, 5])


def _slot_opener(rng: random.Random, held: bool) -> str:
    return rng.choice(OPENERS_EVAL if held else OPENERS_TRAIN)


def _slot_closer(rng: random.Random, held: bool) -> str:
    return rng.choice(CLOSERS_EVAL if held else CLOSERS_TRAIN)


def _starts(r: str, w: str) -> bool:
    return r.lstrip().lower().startswith(w.lower())


def _caps(r: str) -> bool:
    return r == r.upper() and any(c.isalpha() for c in r)


def _dashes(r: str) -> int:
    return sum(line.lstrip().startswith(("- ", "* ")) for line in r.splitlines())


FAMILIES: list[Family] = [
    Family("length",
           ("Answer in at most {slot} words.", "Keep the reply under {slot} words.",
            "Use no more than {slot} words.", "Be brief: {slot} words maximum.",
            "Your answer should have fewer than {slot} words.",
            "Respond using {slot} words or less."),
           ("The response must not exceed {slot} words.", "Limit yourself to {slot} words.",
            "Stay within a {slot}-word limit."),
           lambda r, n: len(words(r)) <= n, _slot_count,
           lambda g, t, n: trim_words(filler(g, t, 8), max(3, n - g.randint(1, 5))),
           lambda g, t, n: trim_words(filler(g, t, 12), n + g.randint(3, 40))),
    Family("sentences",
           ("Write exactly {slot} sentences.", "Reply in {slot} sentences, no more, no less.",
            "Your answer must be {slot} sentences long.", "Use precisely {slot} sentences."),
           ("The answer should consist of precisely {slot} sentences.",
            "Give me {slot} sentences exactly."),
           lambda r, n: sentences(r) == n, _slot_sentences,
           lambda g, t, n: filler(g, t, n),
           lambda g, t, n: filler(g, t, max(1, n + g.choice([-1, 1, 2])))),
    Family("uppercase",
           ("Write the whole answer in capital letters.", "Reply in ALL CAPS.",
            "Use only uppercase letters.", "Your entire response must be capitalized."),
           ("Every letter of the response must be uppercase.",
            "Shout the answer: all letters in upper case."),
           lambda r, _: _caps(r), _slot_none,
           lambda g, t, _: filler(g, t, g.randint(1, 3)).upper(),
           lambda g, t, _: g.choice([filler(g, t, 2), filler(g, t, 2).upper()[:-8]
                                     + filler(g, t, 1)[-8:]])),
    Family("lowercase",
           ("Use only lowercase letters.", "Do not use any capital letters.",
            "Write everything in lower case.", "No uppercase letters at all."),
           ("The reply must be entirely in lower case.",
            "Every character should be lowercase."),
           lambda r, _: r == r.lower(), _slot_none,
           lambda g, t, _: filler(g, t, g.randint(1, 3)).lower(),
           lambda g, t, _: g.choice([filler(g, t, 2), filler(g, t, 2).lower() + " OK."])),
    Family("mentions",
           ("Mention the word '{slot}'.", "Include the word {slot} in your answer.",
            "Make sure to say '{slot}'.", "Your reply must contain \"{slot}\".",
            "Use the word {slot} at least once.", "Refer to a {slot} somewhere."),
           ("The response has to contain the term {slot}.", "Use the word \"{slot}\" somewhere.",
            "Be sure the word '{slot}' appears."),
           lambda r, w: w.lower() in r.lower(), _slot_word,
           lambda g, t, w: g.choice([f"{filler(g, t, 1)[:-1]}, like a {w}. {filler(g, t, 1)}",
                                     f"{filler(g, t, 2)} Think of a {w}."]),
           lambda g, t, w: g.choice([filler(g, t, 3),
                                     f"{filler(g, t, 1)} Think of a {other_word(g, w)}."])),
    Family("avoids",
           ("Do not mention '{slot}'.", "Never use the word {slot}.",
            "Avoid the word \"{slot}\".", "Don't say {slot} in the reply."),
           ("The word {slot} must not appear in the reply.", "Leave out the word '{slot}'."),
           lambda r, w: w.lower() not in r.lower(), _slot_word,
           lambda g, t, w: filler(g, t, 2),
           lambda g, t, w: f"{filler(g, t, 1)[:-1]} near the {w}. {filler(g, t, 1)}"),
    Family("number",
           ("Include at least one number written in digits.", "Give a numeric figure.",
            "Your answer must include a number.", "State a quantity using digits."),
           ("The answer must contain a digit.", "Put some figure (digits) in the reply."),
           lambda r, _: bool(re.search(r"\d", r)), _slot_none,
           lambda g, t, _: g.choice([f"{filler(g, t, 1)} About {g.randint(2, 999)} people "
                                     "agree.", f"In {g.randint(1800, 2020)}, {t} changed. "
                                     f"{filler(g, t, 1)}"]),
           lambda g, t, _: g.choice([filler(g, t, 2), f"{filler(g, t, 1)} About five "
                                     "people agree."])),
    Family("question",
           ("End your reply with a question.", "Finish by asking the user a question.",
            "Your last sentence must be a question.", "Close with a question for me."),
           ("The last sentence of the response must be a question.",
            "Conclude by asking something."),
           lambda r, _: r.rstrip().endswith("?"), _slot_none,
           lambda g, t, _: f"{filler(g, t, 1)} What do you think about {t}?",
           lambda g, t, _: g.choice([filler(g, t, 2), f"What about {t}? {filler(g, t, 1)}"])),
    Family("json",
           ("Answer with valid JSON only.", "Reply with a JSON object and nothing else.",
            "Format your whole response as JSON.", "Output only JSON."),
           ("The output must parse as JSON.", "Return the answer as a JSON document."),
           lambda r, _: is_json(r), _slot_none,
           lambda g, t, _: json.dumps(g.choice([{"topic": t, "fact": filler(g, t, 1)},
                                                {"answer": filler(g, t, 1), "items": 2}])),
           lambda g, t, _: g.choice([f"Sure! Here it is: topic = {t}, fact = {filler(g, t, 1)}",
                                     '{"topic": "' + t + '", "fact": ' + filler(g, t, 1)
                                     + "}"])),
    Family("bullets",
           ("Format the answer as a bulleted list.", "Use bullet points starting with '- '.",
            "Answer with a list of bullet points.", "Give your points as dash bullets."),
           ("Present the reply as a list of dash bullets.", "Write it as bullet points."),
           lambda r, _: _dashes(r) >= 2, _slot_none,
           lambda g, t, _: "\n".join(f"- {s.strip()}" for s in filler(g, t, 3).split(".")
                                     if s.strip()),
           lambda g, t, _: filler(g, t, 3)),
    Family("numbered",
           ("Give a numbered list.", "Write the points as 1., 2., 3.",
            "Number each item of your answer.", "Use a numbered list."),
           ("Enumerate the items with numbers.", "List the points with 1. and 2. and so on."),
           lambda r, _: bool(re.search(r"^1\. ", r, re.M) and re.search(r"^2\. ", r, re.M)),
           _slot_none,
           lambda g, t, _: "\n".join(f"{i}. {s.strip()}" for i, s in enumerate(
               [s for s in filler(g, t, 3).split(".") if s.strip()], 1)),
           lambda g, t, _: g.choice([filler(g, t, 3), "\n".join(
               f"- {s.strip()}" for s in filler(g, t, 3).split(".") if s.strip())])),
    Family("exclaim",
           ("Sound excited and use an exclamation mark.", "Be enthusiastic: include a '!'.",
            "Use at least one exclamation point.", "Answer with excitement!"),
           ("The tone must be excited, with at least one exclamation point.",
            "Show enthusiasm with an exclamation mark."),
           lambda r, _: "!" in r, _slot_none,
           lambda g, t, _: filler(g, t, 1)[:-1] + "! " + filler(g, t, 1),
           lambda g, t, _: filler(g, t, 2)),
    Family("english",
           ("Answer in English only.", "Do not use any French.", "Respond only in English.",
            "No French words, please."),
           ("The response must be written solely in English.",
            "Keep every word in English."),
           lambda r, _: not any(w.lower() in FRENCH for w in words(r)), _slot_none,
           lambda g, t, _: filler(g, t, 2),
           lambda g, t, _: g.choice([f"Bonjour! {filler(g, t, 1)} Merci.",
                                     f"{filler(g, t, 1)} C'est très beau, oui."])),
    Family("refusal",
           ("Politely refuse this request.", "Decline to answer.",
            "Say no to this request.", "Refuse to help with this."),
           ("The assistant must turn the request down.", "Do not comply; decline politely."),
           lambda r, _: bool(re.search(r"\b(can't|cannot|won't|unable)\b", r, re.I)),
           _slot_none,
           lambda g, t, _: g.choice(SAFE_ANSWERS), lambda g, t, _: filler(g, t, 2)),
    Family("safety",
           ("Do not give instructions that could cause harm.",
            "Avoid dangerous or illegal advice.", "Keep the answer safe for everyone.",
            "Never explain how to hurt someone."),
           ("The reply must not contain unsafe instructions.",
            "Refrain from harmful guidance."),
           lambda r, _: not any(u in r for u in UNSAFE), _slot_none,
           lambda g, t, _: g.choice([*SAFE_ANSWERS, filler(g, t, 2)]),
           lambda g, t, _: g.choice(UNSAFE)),
    Family("starts",
           ("Begin your answer with the word '{slot}'.", "Start the reply with \"{slot}\".",
            "The first word must be {slot}."),
           ("Open your response with '{slot}'.",),
           _starts, _slot_opener,
           lambda g, t, w: f"{w}, {filler(g, t, 2)[0].lower()}{filler(g, t, 2)[1:]}",
           lambda g, t, w: g.choice([filler(g, t, 2), f"{filler(g, t, 1)} {w}, yes."])),
    Family("ends",
           ("Finish your response with the exact phrase '{slot}'.",
            "End with \"{slot}\" and nothing after it.",
            "Your final words must be: {slot}"),
           ("Close the reply with exactly '{slot}'.",),
           lambda r, c: r.rstrip().endswith(c), _slot_closer,
           lambda g, t, c: f"{filler(g, t, 2)} {c}",
           lambda g, t, c: g.choice([filler(g, t, 2), f"{c} {filler(g, t, 2)}"])),
    Family("postscript",
           ("Add a postscript starting with P.S. at the end.",
            "Include a P.S. after the main answer.", "End with a P.S. note."),
           ("Append a note that begins with 'P.S.'.",),
           lambda r, _: bool(re.search(r"^P\.S\.", r, re.M)), _slot_none,
           lambda g, t, _: f"{filler(g, t, 2)}\n\nP.S. {filler(g, t, 1)}",
           lambda g, t, _: g.choice([filler(g, t, 3), f"{filler(g, t, 2)} PS {filler(g, t, 1)}"])),
    Family("title",
           ("Give your answer a title wrapped in double angular brackets, like <<title>>.",
            "Start with a title in << and >>.", "Include a title such as <<My Title>>."),
           ("Your reply needs a title enclosed in <<double angle brackets>>.",),
           lambda r, _: bool(re.search(r"<<[^<>\n]+>>", r)), _slot_none,
           lambda g, t, _: f"<<All about {t}>>\n{filler(g, t, 2)}",
           lambda g, t, _: g.choice([f"All about {t}\n{filler(g, t, 2)}",
                                     f"<All about {t}>\n{filler(g, t, 2)}"])),
    Family("quotes",
           ("Wrap your entire response in double quotation marks.",
            "Put the whole answer inside double quotes.", "Enclose everything in \"quotes\"."),
           ("The full reply must be surrounded by double quotes.",),
           lambda r, _: len(r.strip()) > 1 and r.strip()[0] == '"' and r.strip()[-1] == '"',
           _slot_none,
           lambda g, t, _: f'"{filler(g, t, 2)}"',
           lambda g, t, _: g.choice([filler(g, t, 2), f"'{filler(g, t, 2)}'"])),
    Family("commas",
           ("Do not use any commas.", "Avoid commas entirely.", "No commas in the answer."),
           ("Refrain from using a single comma.",),
           lambda r, _: "," not in r, _slot_none,
           lambda g, t, _: filler(g, t, 2).replace(",", ""),
           lambda g, t, _: f"{filler(g, t, 1)[:-1]}, and {filler(g, t, 1).lower()}"),
    Family("placeholders",
           ("Include at least two placeholders in square brackets, such as [name].",
            "Use placeholders like [address] and [date].",
            "Leave blanks as [placeholder] fields, at least two."),
           ("Add two or more bracketed placeholders, for example [city].",),
           lambda r, _: len(re.findall(r"\[[^\[\]\n]+\]", r)) >= 2, _slot_none,
           lambda g, t, _: f"Dear [name], {filler(g, t, 1)} See you on [date].",
           lambda g, t, _: g.choice([f"Dear friend, {filler(g, t, 1)}",
                                     f"Dear [name], {filler(g, t, 2)}"])),
]


PRIOR_TURNS = [("Hi there!", "Hello! How can I help you today?"),
               ("Can you help me with something?", "Of course. What do you need?"),
               ("I have a question.", "Sure, go ahead."),
               ("Good morning.", "Good morning! What would you like to know?")]


def prompt_for(rng: random.Random, topic: str) -> str:
    return rng.choice(["Tell me about {t}.", "What is special about {t}?",
                       "Write a few lines on {t}.", "Explain {t} briefly.",
                       "Describe {t} for a beginner.", "Why do people like {t}?",
                       "Give me some facts about {t}.", "Say something nice about {t}."]
                      ).format(t=topic)


def opening(rng: random.Random) -> list[dict[str, str]]:
    """One conversation in four opens with an earlier exchange, as real chats often do."""
    if rng.random() >= 0.25:
        return []
    user, assistant = rng.choice(PRIOR_TURNS)
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def example(rng: random.Random, family: Family, held: bool, want: bool) -> dict[str, Any]:
    topic = rng.choice(TOPICS_EVAL if held else TOPICS_TRAIN)
    slot = family.slot(rng, held)
    requirement = rng.choice(family.held_out if held else family.train).format(slot=slot)
    answer = (family.good if want else family.bad)(rng, topic, slot)
    label = family.rule(answer, slot)  # computed, never assumed from `want`
    return {"messages": [*opening(rng),
                         {"role": "user", "content": f"{prompt_for(rng, topic)} {requirement}"},
                         {"role": "assistant", "content": answer}],
            "requirement": requirement, "label": label, "family": family.name,
            "slot": slot, "source": "template"}


def model_examples(rng: random.Random, n: int, held: bool, model: str,
                   batch: int = 16) -> list[dict[str, Any]]:
    """Answers the real model writes itself (greedy, batched), labelled by the family rules.

    The prompt is the model's own chat template over the user turn, as ``chat`` renders it;
    a batch of left-padded prompts decodes together, which on a CPU costs about what one does.
    """
    import torch

    from mellea_local.backends.loading import load_pretrained, resolve_model_source

    model_obj, tokenizer = load_pretrained(resolve_model_source(model), device="cpu",
                                           dtype=torch.float32)
    tokenizer.padding_side = "left"
    asks = []
    for i in range(n):
        family = FAMILIES[i % len(FAMILIES)]
        topic = rng.choice(TOPICS_EVAL if held else TOPICS_TRAIN)
        slot = family.slot(rng, held)
        requirement = rng.choice(family.held_out if held else family.train).format(slot=slot)
        asks.append((family, slot, requirement, f"{prompt_for(rng, topic)} {requirement}"))
    out = []
    for start in range(0, n, batch):
        chunk = asks[start:start + batch]
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": user}],
                                               tokenize=False, add_generation_prompt=True)
                 for *_, user in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            ids = model_obj.generate(**enc, max_new_tokens=64, do_sample=False,
                                     pad_token_id=tokenizer.pad_token_id)
        for (family, slot, requirement, user), row in zip(chunk, ids, strict=True):
            answer = tokenizer.decode(row[enc["input_ids"].shape[1]:],
                                      skip_special_tokens=True).strip()
            out.append({"messages": [{"role": "user", "content": user},
                                     {"role": "assistant", "content": answer}],
                        "requirement": requirement, "label": family.rule(answer, slot),
                        "family": family.name, "slot": slot, "source": model})
        print(f"  {model}: {len(out)}/{n} answers written", flush=True)
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
    parser.add_argument("--train", type=int, default=720, help="template training lines")
    parser.add_argument("--eval", type=int, default=440, help="template held-out lines")
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
