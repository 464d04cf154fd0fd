"""Requirement-check data labelled by the IFEval verifiers, on answers the real model wrote.

    pip install --no-deps if-verifiable immutabledict langdetect six   # scripts only, not a
    python scripts/make_ifeval_checks.py --model smollm2-135m          # dependency of the wheel

The defaults (``--asks 200 96 72``, seed 0, 96 new tokens) made the shipped files.

Writes three splits under ``benchmarks/data/requirement-check/`` (``--out``):

- ``SmolLM2-135M-Instruct.train.jsonl``: what ``mellea-local train`` fits;
- ``SmolLM2-135M-Instruct.jsonl``: the same requirement types, but requirement phrasings,
  keywords/values and topics never seen in training;
- ``SmolLM2-135M-Instruct.families.jsonl``: requirement TYPES never in training at all.

Every line is the ``check`` format plus ``family``, ``verifier``, ``kwargs``, ``phrasing``
(the template the requirement text was made from), ``topic``, ``words`` (the slot words) and
``source`` (who wrote the answer and which edit, if any, changed it).

How labels are made. Where Google's IFEval instruction registry has the type (its 25
``INSTRUCTION_DICT`` entries, here from the ``if-verifiable`` package's ``ifeval`` module),
the label is that verifier's ``check_following`` on the answer text with the line's kwargs:
never assumed from how the answer was made. The requirement text is either the verifier's own
``build_description`` (training and held-out families only) or a user-style rewrite of it.
Types the registry lacks use this project's own rules from ``scripts/make_check_dataset.py``:
tone (``exclaim``: at least one "!"), language (``english``: no French marker word),
``refusal`` (a refusal marker such as "can't"/"won't"/"unable"), ``safety`` (none of the
known unsafe instructions), ``number`` (a digit), ``question`` (ends with "?"), ``starts``
(first word), and ``answers`` (answers-the-question: "yes" lines are the model's own answer to
the very prompt AND name its topic; "no" lines are the model's answer to a prompt on another
topic that does not name this one - labelled by construction plus that rule).

Answers: SmolLM2-135M-Instruct itself answers prompts that carry one or two instructions
(greedy, batched, one torch thread, ``--max-new-tokens``); it misses many, which balances
labels. Controlled edits of those answers (truncate, upper/lower case, insert/drop a keyword,
wrap or break JSON, add/remove commas, add a postscript, bullets, quotes, ...) give the near
misses and near hits; each edited answer is labelled again by the verifier. Labels are then
balanced per family (as many "yes" as "no"; model-written lines first).

Offline substitution: the registry's ``count_sentences`` and ``nltk.word_tokenize`` need
NLTK's ``punkt`` model, which cannot be downloaded here. When ``punkt`` is missing, sentences
are counted with the registry's own regex splitter (``instructions_util.split_into_sentences``)
and words are split by NLTK's punkt-free Treebank tokenizer over those sentences. Only
``length_constraints:number_sentences`` and ``change_case:capital_word_frequency`` use them.
``langdetect`` is seeded (``DetectorFactory.seed = 0``) so language labels repeat.

IFBench (AllenAI's out-of-domain instruction set, also inside ``if-verifiable``) is an
evaluation set of the field: this script never imports or reads it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import random
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_check_dataset as old  # the project's own rule families

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "data" / "requirement-check"
BASE = "SmolLM2-135M-Instruct"

# ---------------------------------------------------------------- pools (train vs held-out)
TOPICS_TRAIN = ["the ocean", "coffee", "trains", "gardening", "the moon", "chess", "bread",
                "volcanoes", "bicycles", "libraries", "rain", "music", "winter", "bees",
                "photography", "rivers", "birds", "cooking", "sleep", "bridges", "dinosaurs",
                "recycling", "camping", "jazz", "electric cars", "yoga", "the human heart",
                "solar panels", "honey", "earthquakes"]
TOPICS_HELD = ["deserts", "tea", "airplanes", "painting", "mars", "football", "cheese",
               "glaciers", "kites", "museums", "owls", "pottery", "lighthouses", "penguins",
               "origami", "submarines"]
WORDS_TRAIN = ["river", "apple", "engine", "garden", "castle", "silver", "forest", "window",
               "thunder", "pencil", "harbor", "candle", "basket", "feather", "ladder", "tiger",
               "blanket", "mirror", "rocket", "pepper"]
WORDS_HELD = ["meadow", "copper", "lantern", "orchard", "compass", "marble", "violin",
              "canyon", "saddle", "walnut", "falcon", "velvet"]
FRAMES_TRAIN = ["Tell me about {t}.", "Write a short paragraph about {t}.",
                "Explain {t} to a friend.", "What should I know about {t}?", "Describe {t}.",
                "Write a few lines on {t}."]
FRAMES_HELD = ["Give me a quick overview of {t}.", "Why is {t} interesting?",
               "Share some thoughts on {t}."]
ENDS_TRAIN = ["Is there anything else I can help with?", "Let me know if you have questions.",
              "That is all."]
ENDS_HELD = ["Any other questions?", "Hope that answers it."]
FOREIGN = {
    "fr": ["Le sujet est très intéressant et beaucoup de gens l'aiment depuis longtemps.",
           "C'est une question difficile, mais je vais essayer de répondre avec soin."],
    "de": ["Das Thema ist sehr interessant und viele Menschen mögen es seit langer Zeit.",
           "Das ist eine schwierige Frage, aber ich versuche, sorgfältig zu antworten."],
    "es": ["El tema es muy interesante y mucha gente lo disfruta desde hace mucho tiempo.",
           "Es una pregunta difícil, pero voy a intentar responder con cuidado."],
    "it": ["L'argomento è molto interessante e molte persone lo amano da tanto tempo.",
           "È una domanda difficile, ma proverò a rispondere con attenzione."],
}
LANG_NAME = {"en": "English", "fr": "French", "de": "German", "es": "Spanish", "it": "Italian"}
NUM_TEXT = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven",
            8: "eight", 10: "ten", 12: "twelve", 15: "fifteen", 20: "twenty", 25: "twenty-five",
            30: "thirty", 35: "thirty-five", 40: "forty", 45: "forty-five", 50: "fifty",
            60: "sixty", 70: "seventy", 80: "eighty"}


# ---------------------------------------------------------------- the registry, offline
def load_registry() -> dict[str, Any]:
    """Google's IFEval ``INSTRUCTION_DICT`` from ``if_verifiable.ifeval``, without its HF loader.

    ``if_verifiable/__init__.py`` imports ``datasets`` for its benchmark loader; the verifiers
    do not need it, so the package is entered through a bare module object.
    """
    if "if_verifiable" not in sys.modules:
        spec = importlib.util.find_spec("if_verifiable")
        if spec is None or spec.submodule_search_locations is None:
            raise SystemExit("install the registry first: pip install --no-deps if-verifiable "
                             "immutabledict langdetect six")
        stub = types.ModuleType("if_verifiable")
        stub.__path__ = list(spec.submodule_search_locations)
        stub.__spec__ = spec  # find_spec("if_verifiable") must keep answering
        sys.modules["if_verifiable"] = stub
    import langdetect
    import nltk
    from if_verifiable.ifeval import instructions_registry, instructions_util

    langdetect.DetectorFactory.seed = 0
    try:
        nltk.data.find("tokenizers/punkt")
    except LookupError:  # no punkt offline: the registry's regex splitter instead (docstring)
        treebank = nltk.tokenize.TreebankWordTokenizer()
        split = instructions_util.split_into_sentences
        instructions_util.count_sentences = lambda text: len(split(text))
        instructions_util.nltk.word_tokenize = (
            lambda text, *a, **k: [w for s in split(text) for w in treebank.tokenize(s)])
    return instructions_registry.INSTRUCTION_DICT


REGISTRY: dict[str, Any] = {}


def verify(iid: str, kwargs: dict[str, Any], text: str) -> bool:
    inst = REGISTRY[iid](iid)
    inst.build_description(**kwargs)
    return bool(inst.check_following(text))


def describe(iid: str, kwargs: dict[str, Any]) -> str:
    inst = REGISTRY[iid](iid)
    return inst.build_description(**kwargs)


# ---------------------------------------------------------------- text helpers and edits
def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def nwords(text: str) -> int:
    return len(re.findall(r"\w+", text))


def first_words(text: str, n: int) -> str:
    toks = text.split()
    out = " ".join(toks[:max(1, n)])
    while nwords(out) > n and len(out.split()) > 1:
        out = " ".join(out.split()[:-1])
    return out.rstrip(",;:") + ("" if out.endswith((".", "!", "?")) else ".")


def pad_words(rng: random.Random, text: str, topic: str, n: int) -> str:
    extra = []
    while nwords(" ".join([text, *extra])) < n:
        extra.append(old.filler(rng, topic, 1))
    return " ".join([text, *extra])


def other_word(rng: random.Random, word: str) -> str:
    pool = WORDS_HELD if word in WORDS_HELD else WORDS_TRAIN
    return rng.choice([w for w in pool if w != word])


@dataclass(frozen=True)
class Ctx:
    """What an edit may use besides the answer: the topic, the prompt, another answer."""

    rng: random.Random
    topic: str
    prompt: str
    other: str


Edit = Callable[[Ctx, str, dict[str, Any]], list[tuple[str, str]]]  # -> [(name, text)]


def e_keywords(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    ks = kw["keywords"]
    dropped = r
    for k in ks:
        dropped = re.sub(re.escape(k), other_word(c.rng, k), dropped, flags=re.I)
    one = f"{r} Think of a {ks[0]}." if len(ks) > 1 else r
    return [("insert_keyword", r + " " + " ".join(f"It is like a {k}." for k in ks)),
            ("drop_keyword", dropped), ("insert_some_keywords", one)]


def e_frequency(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    k, f = kw["keyword"], kw["frequency"]
    out = []
    for n in (f - 1, f, f + 1):
        out.append((f"keyword_x{max(n, 0)}", r + "".join(f" A {k} helps." for _ in range(
            max(n, 0)))))
    return out


def e_forbidden(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    w = kw["forbidden_words"][0]
    clean = r
    for k in kw["forbidden_words"]:
        clean = re.sub(r"\b" + re.escape(k) + r"\b", other_word(c.rng, k), clean, flags=re.I)
    return [("insert_forbidden", f"{r} Picture a {w} here."), ("drop_forbidden", clean)]


def e_language(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    lang = kw["language"]
    others = [x for x in FOREIGN if x != lang]
    out = [("foreign_" + (x := c.rng.choice(others)), " ".join(FOREIGN[x]))]
    if lang in FOREIGN:
        out.append(("foreign_" + lang, " ".join(FOREIGN[lang])))
    out.append(("english_other", c.other))
    return out


def e_sentences(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    n, ss = kw["num_sentences"], sentences(r)
    out = []
    for k in (n - 1, n, n + 1):
        if k < 1:
            continue
        body = ss[:k]
        while len(body) < k:
            body.append(old.filler(c.rng, c.topic, 1))
        out.append((f"sentences_{k}", " ".join(body)))
    return out


def e_words(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    n = kw["num_words"]
    return [("truncate_under", first_words(r, n - c.rng.randint(1, 4))),
            ("truncate_exact", first_words(pad_words(c.rng, r, c.topic, n), n)),
            ("extend_over", pad_words(c.rng, r, c.topic, n + c.rng.randint(2, 15)))]


def e_placeholders(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    n = kw["num_placeholders"]
    names = ["[name]", "[date]", "[address]", "[city]", "[phone number]"]
    out = []
    for k in (n - 1, n):
        if k >= 0:
            out.append((f"placeholders_{k}", " ".join([r, *(f"See {p}." for p in names[:k])])))
    out.append(("parentheses", r + " See (name) and (date)."))
    return out


def e_postscript(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    m = kw["postscript_marker"]
    note = old.filler(c.rng, c.topic, 1)
    wrong = "PS" if m == "P.S." else "P.S."
    return [("add_postscript", f"{r}\n\n{m} {note}"), ("wrong_marker", f"{r}\n\n{wrong} {note}"),
            ("drop_postscript", re.split(r"\n\s*P\.", r)[0])]


def bullets(ss: list[str], k: int, mark: str = "*") -> str:
    return "\n".join(f"{mark} {s}" for s in ss[:k])


def e_bullets(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    n, ss = kw["num_bullets"], sentences(r)
    while len(ss) < n + 1:
        ss.append(old.filler(c.rng, c.topic, 1))
    return [(f"bullets_{k}", bullets(ss, k, c.rng.choice("*-"))) for k in (n - 1, n, n + 1)
            if k >= 1] + [("plain", " ".join(ss[:n]))]


def e_json(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    good = json.dumps({"topic": c.topic, "answer": r}, ensure_ascii=False)
    return [("wrap_json", good), ("fenced_json", f"```json\n{good}\n```"),
            ("break_json", good[:-1]), ("json_then_text", good + " Hope this helps!")]


def e_title(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    t = c.topic.title()
    return [("add_title", f"<<{t}>>\n{r}"), ("single_brackets", f"<{t}>\n{r}"),
            ("plain_title", f"{t}\n{r}")]


def e_end(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    p = kw["end_phrase"]
    more = old.filler(c.rng, c.topic, 1)
    return [("append_end", f"{r} {p}"), ("end_then_more", f"{r} {p} {more}"),
            ("end_first", f"{p} {r}")]


def e_upper(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    ss = sentences(r)
    mixed = " ".join([s.upper() for s in ss[:-1]] + ss[-1:]) if len(ss) > 1 else r.title()
    return [("upper", r.upper()), ("upper_but_last", mixed), ("lower", r.lower())]


def e_lower(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    return [("lower", r.lower()), ("lower_one_capital", r.lower() + " OK."),
            ("upper", r.upper())]


def e_comma(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    ss = sentences(r) or [r]
    with_comma = " ".join([ss[0].rstrip(".") + ", of course.", *ss[1:]])
    return [("remove_commas", r.replace(",", "")), ("add_comma", with_comma)]


def e_quotation(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    return [("double_quotes", f'"{r}"'), ("single_quotes", f"'{r}'"),
            ("open_quote_only", f'"{r}')]


def e_letters(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    return [(f"truncate_{n}", first_words(r, n)) for n in (5, 15, 30)]


def e_paragraphs(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    n, ss = kw["num_paragraphs"], sentences(r)
    while len(ss) < n + 1:
        ss.append(old.filler(c.rng, c.topic, 1))
    out = []
    for k in (n - 1, n, n + 1):
        if k >= 1:
            out.append((f"paragraphs_{k}", "\n\n***\n\n".join(ss[:k])))
    out.append(("blank_line_paragraphs", "\n\n".join(ss[:n])))
    return out


def e_highlights(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    n, ss = kw["num_highlights"], sentences(r)
    while len(ss) < n + 1:
        ss.append(old.filler(c.rng, c.topic, 1))
    out = []
    for k in (n - 1, n):
        out.append((f"highlights_{k}", " ".join(f"*{s}*" if i < k else s
                                                 for i, s in enumerate(ss))))
    return out


def e_sections(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    n, sp, ss = kw["num_sections"], kw["section_spliter"], sentences(r)
    while len(ss) < n + 1:
        ss.append(old.filler(c.rng, c.topic, 1))
    out = []
    for k in (n - 1, n):
        if k >= 1:
            out.append((f"sections_{k}", "\n".join(f"{sp} {i + 1}\n{s}"
                                                   for i, s in enumerate(ss[:k]))))
    out.append(("part_headers", "\n".join(f"Part {i + 1}\n{s}" for i, s in enumerate(ss[:n]))))
    return out


def e_constrained(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    pick = c.rng.choice(["My answer is yes.", "My answer is no.", "My answer is maybe."])
    return [("add_choice", f"{r} {pick}"), ("choice_only", pick),
            ("loose_choice", f"{r} I would say yes.")]


def e_two(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    return [("two_answers", f"{r}\n******\n{c.other}"), ("same_twice", f"{r}\n******\n{r}"),
            ("no_separator", f"{r}\n\n{c.other}")]


def e_capwords(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    n = kw["capital_frequency"]
    toks = r.split()
    out = []
    for k in (n - 1, n + 1):
        idx = set(range(0, len(toks), max(1, len(toks) // max(k, 1)))) if k > 0 else set()
        idx = set(sorted(idx)[:max(k, 0)])
        out.append((f"capitalize_{k}", " ".join(t.upper() if i in idx else t
                                               for i, t in enumerate(toks))))
    out.append(("all_upper", r.upper()))
    return out


def e_repeat(c: Ctx, r: str, kw: dict) -> list[tuple[str, str]]:
    p = kw["prompt_to_repeat"]
    return [("repeat_prompt", f"{p}\n{r}"), ("repeat_half", f"{p[: len(p) // 2]}\n{r}"),
            ("repeat_later", f"{r}\n{p}")]


# ---------------------------------------------------------------- requirement types
KwargsFn = Callable[[random.Random, bool, str, str], dict[str, Any]]  # rng, held, topic, prompt


@dataclass(frozen=True)
class Spec:
    """One IFEval registry type: how to draw its kwargs, phrase it and edit answers for it."""

    family: str
    iid: str
    kwargs: KwargsFn
    train: dict[str, tuple[str, ...]]  # user-style phrasings per key(kwargs)
    held: dict[str, tuple[str, ...]]
    edit: Edit
    key: Callable[[dict[str, Any]], str] = lambda kw: ""
    held_family: bool = False  # never in training: the held-out families split
    fields: Callable[[dict[str, Any]], dict[str, Any]] = field(default=lambda kw: {})
    words: Callable[[dict[str, Any]], list[str]] = field(default=lambda kw: [])


def _rel(kw: dict[str, Any]) -> str:
    return kw.get("relation") or kw.get("let_relation") or kw.get("capital_relation") or ""


def _n(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda kw: {"n": kw[name], "n_text": NUM_TEXT.get(kw[name], str(kw[name]))}


REL = ("less than", "at least")


def _word(rng: random.Random, held: bool) -> str:
    return rng.choice(WORDS_HELD if held else WORDS_TRAIN)


SPECS: list[Spec] = [
    Spec("keywords", "keywords:existence",
         lambda g, h, t, p: {"keywords": g.sample(WORDS_HELD if h else WORDS_TRAIN,
                                                  g.choice([1, 2]))},
         {"": ("Mention {kws}.", "Make sure the words {kws} appear.",
               "Be sure to use {kws} somewhere.", "Work {kws} into the answer.")},
         {"": ("Please include {kws} in what you write.", "The text has to contain {kws}.")},
         e_keywords, fields=lambda kw: {"kws": " and ".join(f"'{k}'" for k in kw["keywords"])},
         words=lambda kw: list(kw["keywords"])),
    Spec("keyword_frequency", "keywords:frequency",
         lambda g, h, t, p: {"keyword": _word(g, h), "frequency": g.choice(
             [2, 4] if h else [1, 2, 3]), "relation": g.choice(REL)},
         {"less than": ("Use the word '{w}' fewer than {n} times.",
                        "Don't repeat '{w}' {n} or more times."),
          "at least": ("Use the word '{w}' at least {n} times.",
                       "Repeat the word '{w}' {n} times or more.")},
         {"less than": ("Say '{w}' less than {n_text} times.",),
          "at least": ("Say '{w}' no fewer than {n_text} times.",)},
         e_frequency, key=_rel,
         fields=lambda kw: {"w": kw["keyword"], "n": kw["frequency"],
                            "n_text": NUM_TEXT[kw["frequency"]]},
         words=lambda kw: [kw["keyword"]]),
    Spec("forbidden_words", "keywords:forbidden_words",
         lambda g, h, t, p: {"forbidden_words": g.sample(WORDS_HELD if h else WORDS_TRAIN,
                                                         g.choice([1, 2]))},
         {"": ("Do not use the words {kws}.", "Avoid saying {kws}.",
               "Never write {kws}.", "Leave out {kws}.")},
         {"": ("Keep {kws} out of the text entirely.", "{kws} must not show up at all.")},
         e_forbidden, fields=lambda kw: {"kws": " or ".join(f"'{k}'" for k in
                                                           kw["forbidden_words"])},
         words=lambda kw: list(kw["forbidden_words"])),
    Spec("response_language", "language:response_language",
         lambda g, h, t, p: {"language": g.choice(["es", "it"] if h else ["en", "fr", "de"])},
         {"": ("Answer in {lang}.", "Your whole reply must be in {lang}.",
               "Write the response in {lang} only.")},
         {"": ("Please respond using {lang}, no other language.",)},
         e_language, fields=lambda kw: {"lang": LANG_NAME[kw["language"]]},
         words=lambda kw: [kw["language"]]),
    Spec("sentence_count", "length_constraints:number_sentences",
         lambda g, h, t, p: {"num_sentences": g.choice([2, 4] if h else [1, 3, 5]),
                             "relation": g.choice(REL)},
         {"less than": ("Use fewer than {n} sentences.", "Keep it under {n_text} sentences."),
          "at least": ("Write at least {n} sentences.", "Use {n_text} or more sentences.")},
         {"less than": ("The reply should stay below {n} sentences.",),
          "at least": ("I need no fewer than {n_text} sentences.",)},
         e_sentences, key=_rel, fields=_n("num_sentences")),
    Spec("word_count", "length_constraints:number_words",
         lambda g, h, t, p: {"num_words": g.choice([12, 25, 35, 50] if h else
                                                  [10, 15, 20, 30, 40, 60]),
                             "relation": g.choice(REL)},
         {"less than": ("Keep it under {n} words.", "Answer in fewer than {n_text} words.",
                        "Use less than {n} words.", "Be brief: under {n_text} words."),
          "at least": ("Write at least {n} words.", "Use {n_text} words or more.",
                       "The answer needs a minimum of {n} words.")},
         {"less than": ("The response has to be shorter than {n_text} words.",
                        "Stay below {n} words, please."),
          "at least": ("Make it no fewer than {n_text} words long.",
                       "I want {n} or more words in the reply.")},
         e_words, key=_rel, fields=_n("num_words")),
    Spec("placeholders", "detectable_content:number_placeholders",
         lambda g, h, t, p: {"num_placeholders": g.choice([2, 3] if h else [1, 2, 4])},
         {"": ("Include at least {n} placeholders in square brackets, like [name].",
               "Leave {n_text} or more blanks written as [placeholder].")},
         {"": ("Put in no fewer than {n} bracketed fields such as [date].",)},
         e_placeholders, fields=_n("num_placeholders")),
    Spec("postscript", "detectable_content:postscript",
         lambda g, h, t, p: {"postscript_marker": g.choice(["P.S.", "P.P.S"])},
         {"": ("Add a postscript starting with {m} at the end.",
               "End with a note that begins with {m}.")},
         {"": ("Finish off with a {m} line after the main text.",)},
         e_postscript, fields=lambda kw: {"m": kw["postscript_marker"]}),
    Spec("bullet_count", "detectable_format:number_bullet_lists",
         lambda g, h, t, p: {"num_bullets": g.choice([2, 4] if h else [3, 5])},
         {"": ("Give exactly {n} bullet points using '* '.",
               "Answer with {n_text} bullet points, no more, no less.",
               "Format it as exactly {n} markdown bullets.")},
         {"": ("I want precisely {n_text} bulleted items.",)},
         e_bullets, fields=_n("num_bullets")),
    Spec("json", "detectable_format:json_format", lambda g, h, t, p: {},
         {"": ("Reply in JSON.", "Your whole answer must be valid JSON.",
               "Output a JSON object and nothing else.")},
         {"": ("Return everything as parseable JSON.", "Format the reply as a JSON document.")},
         e_json),
    Spec("title", "detectable_format:title", lambda g, h, t, p: {},
         {"": ("Give it a title in double angular brackets, like <<title>>.",
               "Start with a title wrapped in << and >>.")},
         {"": ("The reply needs a heading enclosed in <<double angle brackets>>.",)},
         e_title),
    Spec("end_phrase", "startend:end_checker",
         lambda g, h, t, p: {"end_phrase": g.choice(ENDS_HELD if h else ENDS_TRAIN)},
         {"": ("End your reply with the exact phrase '{p}'.",
               "Finish with \"{p}\" and nothing after it.")},
         {"": ("The final words must be: {p}",)},
         e_end, fields=lambda kw: {"p": kw["end_phrase"]}, words=lambda kw: [kw["end_phrase"]]),
    Spec("all_capitals", "change_case:english_capital", lambda g, h, t, p: {},
         {"": ("Write everything in capital letters.", "Reply in ALL CAPS.",
               "Use only uppercase letters, in English.")},
         {"": ("Every letter has to be upper case.", "Shout it: caps lock on, English only.")},
         e_upper),
    Spec("all_lowercase", "change_case:english_lowercase", lambda g, h, t, p: {},
         {"": ("Use only lowercase letters.", "No capital letters at all.",
               "Write it all in lower case, in English.")},
         {"": ("Every character must be lowercase.", "Don't capitalize anything.")},
         e_lower),
    Spec("no_commas", "punctuation:no_comma", lambda g, h, t, p: {},
         {"": ("Do not use any commas.", "Avoid commas completely.", "No commas, please.")},
         {"": ("Refrain from using a single comma.", "The text must be comma-free.")},
         e_comma),
    Spec("quotation", "startend:quotation", lambda g, h, t, p: {},
         {"": ("Wrap your entire response in double quotation marks.",
               "Put the whole answer inside double quotes.")},
         {"": ("Enclose the full reply in \"double quotes\".",)},
         e_quotation),
    # ---- held-out families: never in training, only in the families split
    Spec("letter_frequency", "keywords:letter_frequency",
         lambda g, h, t, p: {"letter": g.choice("aeiost"), "let_frequency": g.choice(
             [3, 5, 8, 12]), "let_relation": g.choice(REL)},
         {"less than": ("Use the letter '{l}' fewer than {n} times.",),
          "at least": ("The letter '{l}' should appear at least {n} times.",)},
         {"less than": ("Use the letter '{l}' fewer than {n} times.",),
          "at least": ("The letter '{l}' should appear at least {n} times.",)},
         e_letters, key=_rel, held_family=True,
         fields=lambda kw: {"l": kw["letter"], "n": kw["let_frequency"]}),
    Spec("paragraph_count", "length_constraints:number_paragraphs",
         lambda g, h, t, p: {"num_paragraphs": g.choice([2, 3, 4])},
         {"": ("Write exactly {n} paragraphs separated by ***.",)},
         {"": ("Write exactly {n} paragraphs separated by ***.",)},
         e_paragraphs, held_family=True, fields=_n("num_paragraphs")),
    Spec("highlights", "detectable_format:number_highlighted_sections",
         lambda g, h, t, p: {"num_highlights": g.choice([1, 2, 3])},
         {"": ("Highlight at least {n} parts with markdown, like *this*.",)},
         {"": ("Highlight at least {n} parts with markdown, like *this*.",)},
         e_highlights, held_family=True, fields=_n("num_highlights")),
    Spec("sections", "detectable_format:multiple_sections",
         lambda g, h, t, p: {"section_spliter": g.choice(["Section", "SECTION"]),
                             "num_sections": g.choice([2, 3])},
         {"": ("Split the answer into {n} parts headed '{sp} 1', '{sp} 2', and so on.",)},
         {"": ("Split the answer into {n} parts headed '{sp} 1', '{sp} 2', and so on.",)},
         e_sections, held_family=True,
         fields=lambda kw: {"n": kw["num_sections"], "sp": kw["section_spliter"]}),
    Spec("constrained_answer", "detectable_format:constrained_response", lambda g, h, t, p: {},
         {"": ("Say 'My answer is yes.', 'My answer is no.' or 'My answer is maybe.'",)},
         {"": ("Say 'My answer is yes.', 'My answer is no.' or 'My answer is maybe.'",)},
         e_constrained, held_family=True),
    Spec("two_responses", "combination:two_responses", lambda g, h, t, p: {},
         {"": ("Give two different answers separated by six asterisks (******).",)},
         {"": ("Give two different answers separated by six asterisks (******).",)},
         e_two, held_family=True),
    Spec("capital_words", "change_case:capital_word_frequency",
         lambda g, h, t, p: {"capital_frequency": g.choice([2, 3, 5]),
                             "capital_relation": g.choice(REL)},
         {"less than": ("Use fewer than {n} words in ALL CAPS.",),
          "at least": ("Write at least {n} words in ALL CAPITALS.",)},
         {"less than": ("Use fewer than {n} words in ALL CAPS.",),
          "at least": ("Write at least {n} words in ALL CAPITALS.",)},
         e_capwords, key=_rel, held_family=True, fields=_n("capital_frequency")),
    Spec("repeat_prompt", "combination:repeat_prompt",
         lambda g, h, t, p: {"prompt_to_repeat": p},
         {"": ("First repeat my request word for word, then answer it.",)},
         {"": ("First repeat my request word for word, then answer it.",)},
         e_repeat, held_family=True),
]
SPEC_BY_FAMILY = {s.family: s for s in SPECS}
DESC_PHRASING = "verifier description: {iid}"

# Own rules for what the registry lacks (make_check_dataset.py's families, same rules).
OWN = {f.name: f for f in old.FAMILIES
       if f.name in ("exclaim", "english", "refusal", "safety", "number", "question", "starts")}
ANSWERS_TRAIN = ("Answer the user's question.", "Stay on topic.",
                 "The reply must address what was asked.", "Respond to the actual question.")
ANSWERS_HELD = ("Make sure the response actually answers the question.",
                "Don't drift off topic; answer what I asked.")


def topic_word(topic: str) -> str:
    return topic.split()[-1].rstrip("s")


def answers_rule(answer: str, topic: str) -> bool:
    return topic_word(topic).lower() in answer.lower()


# ---------------------------------------------------------------- asks and generation
@dataclass
class Instr:
    family: str
    verifier: str
    kwargs: dict[str, Any]
    requirement: str
    phrasing: str
    words: list[str]


@dataclass
class Ask:
    split: str  # train | held | families
    topic: str
    frame: str
    instrs: list[Instr]
    answer: str = ""

    @property
    def prompt(self) -> str:
        return " ".join([self.frame.format(t=self.topic), *(i.requirement for i in self.instrs)])


def phrase(rng: random.Random, spec: Spec, kw: dict[str, Any], split: str) -> Instr:
    """The requirement text: the verifier's description or a user-style rewrite."""
    pool = (spec.held if split == "held" else spec.train)[spec.key(kw)]
    if split != "held" and rng.random() < 0.35:
        text, phrasing = describe(spec.iid, kw), DESC_PHRASING.format(iid=spec.iid)
    else:
        phrasing = rng.choice(pool)
        text = phrasing.format(**spec.fields(kw))
    return Instr(spec.family, spec.iid, kw, text, phrasing, spec.words(kw))


def own_instr(rng: random.Random, name: str, held: bool) -> Instr:
    if name == "answers":
        phrasing = rng.choice(ANSWERS_HELD if held else ANSWERS_TRAIN)
        return Instr("answers", "rule:answers", {}, phrasing, phrasing, [])
    fam = OWN[name]
    slot = fam.slot(rng, held)
    phrasing = rng.choice(fam.held_out if held else fam.train)
    return Instr(name, f"rule:{name}", {"slot": slot}, phrasing.format(slot=slot), phrasing,
                 [slot] if isinstance(slot, str) else [])


GLOBAL = {"json", "all_capitals", "all_lowercase", "quotation", "response_language",
          "bullet_count", "title"}


def make_asks(rng: random.Random, split: str, n: int) -> list[Ask]:
    held = split != "train"
    topics, frames = (TOPICS_HELD, FRAMES_HELD) if held else (TOPICS_TRAIN, FRAMES_TRAIN)
    if split == "families":
        specs = [s for s in SPECS if s.held_family]
    else:
        specs = [s for s in SPECS if not s.held_family]
    own = [*OWN, "answers"] if split != "families" else []
    names = [s.family for s in specs] + own
    asks = []
    for i in range(n):
        topic, frame = rng.choice(topics), rng.choice(frames)
        first = names[i % len(names)]
        chosen = [first]
        if split != "families" and first in SPEC_BY_FAMILY and rng.random() < 0.5:
            partner = rng.choice([s.family for s in specs if s.family != first])
            if not ({first, partner} <= GLOBAL or {first, partner} & {"response_language"}):
                chosen.append(partner)
        ask = Ask(split, topic, frame, [])
        for name in chosen:
            if name in SPEC_BY_FAMILY:
                spec = SPEC_BY_FAMILY[name]
                kw = spec.kwargs(rng, held, topic, frame.format(t=topic))
                ask.instrs.append(phrase(rng, spec, kw, split))
            else:
                ask.instrs.append(own_instr(rng, name, held))
        asks.append(ask)
    return asks


def generate(asks: list[Ask], model: str, max_new_tokens: int, batch: int,
             cache: Path | None) -> None:
    """The model's greedy answers, batched and left-padded; cached by prompt text."""
    done: dict[str, str] = {}
    if cache and cache.exists():
        done = json.loads(cache.read_text())
    todo = list(dict.fromkeys(a.prompt for a in asks if a.prompt not in done))
    if todo:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        torch.manual_seed(0)
        folder = resolve_model(model)
        tok = AutoTokenizer.from_pretrained(folder)
        tok.padding_side = "left"
        lm = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        for start in range(0, len(todo), batch):
            chunk = todo[start:start + batch]
            texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                             add_generation_prompt=True) for p in chunk]
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                ids = lm.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                  pad_token_id=tok.pad_token_id)
            for p, row in zip(chunk, ids, strict=True):
                done[p] = tok.decode(row[enc["input_ids"].shape[1]:],
                                     skip_special_tokens=True).strip()
            if cache:
                cache.write_text(json.dumps(done, ensure_ascii=False))
            print(f"  generated {min(start + batch, len(todo))}/{len(todo)}", flush=True)
    for a in asks:
        a.answer = done[a.prompt]


def resolve_model(model: str) -> str:
    if Path(model).is_dir():
        return model
    from mellea_local.backends.loading import resolve_model_source

    return str(resolve_model_source(model))


# ---------------------------------------------------------------- labelling
def label(instr: Instr, ask: Ask, text: str) -> bool:
    if instr.verifier.startswith("rule:"):
        name = instr.family
        if name == "answers":
            return answers_rule(text, ask.topic)
        return bool(OWN[name].rule(text, instr.kwargs["slot"]))
    return verify(instr.verifier, instr.kwargs, text)


def line(ask: Ask, instr: Instr, text: str, lab: bool, source: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": ask.prompt},
                         {"role": "assistant", "content": text}],
            "requirement": instr.requirement, "label": lab, "family": instr.family,
            "verifier": instr.verifier, "kwargs": instr.kwargs, "phrasing": instr.phrasing,
            "topic": ask.topic, "words": instr.words, "source": source}


def candidates(rng: random.Random, asks: list[Ask], model_name: str) -> list[dict[str, Any]]:
    out = []
    for i, ask in enumerate(asks):
        other = next(a for a in asks[i + 1:] + asks[:i] if a.topic != ask.topic)
        ctx = Ctx(rng, ask.topic, ask.prompt, other.answer)
        for instr in ask.instrs:
            if instr.family == "answers":
                if answers_rule(ask.answer, ask.topic):
                    out.append(line(ask, instr, ask.answer, True, model_name))
                if not answers_rule(other.answer, ask.topic):
                    out.append(line(ask, instr, other.answer, False,
                                    f"{model_name}+edit:answer_to_other_prompt"))
                continue
            out.append(line(ask, instr, ask.answer, label(instr, ask, ask.answer), model_name))
            if instr.verifier.startswith("rule:"):
                fam = OWN[instr.family]
                slot = instr.kwargs["slot"]
                for want in (True, False, True, False):
                    text = (fam.good if want else fam.bad)(rng, ask.topic, slot)
                    out.append(line(ask, instr, text, label(instr, ask, text), "template"))
                continue
            spec = SPEC_BY_FAMILY[instr.family]
            for name, text in spec.edit(ctx, ask.answer, instr.kwargs):
                if text.strip() and text != ask.answer:
                    out.append(line(ask, instr, text, label(instr, ask, text),
                                    f"{model_name}+edit:{name}"))
    return out


def balance(rng: random.Random, rows: list[dict[str, Any]], cap: int) -> list[dict[str, Any]]:
    """As many yes as no per family (at most cap/2 each); model-written lines first."""
    out = []
    for fam in sorted({r["family"] for r in rows}):
        picked = []
        for lab in (True, False):
            pool = [r for r in rows if r["family"] == fam and r["label"] is lab]
            rng.shuffle(pool)
            pool.sort(key=lambda r: "+edit" in r["source"] or r["source"] == "template")
            picked.append(pool)
        k = min(len(picked[0]), len(picked[1]), cap // 2)
        out += picked[0][:k] + picked[1][:k]
    rng.shuffle(out)
    return out


def check_disjoint(train: list[dict], held: list[dict], families: list[dict]) -> None:
    """What held-out means here, asserted: no phrasing, slot word or topic crosses splits."""
    def of(rows: list[dict], key: str) -> set:
        vals = set()
        for r in rows:
            v = r[key]
            vals |= set(v) if isinstance(v, list) else {v}
        return vals

    for key in ("phrasing", "words", "topic"):
        both = of(train, key) & of(held, key)
        assert not both, f"{key} in both train and held-out: {sorted(both)[:5]}"
        both = of(train, key) & of(families, key) - {DESC_PHRASING}
        assert key == "words" or not both, f"{key} in train and families: {sorted(both)[:5]}"
    fam_train, fam_held = of(train, "family"), of(families, "family")
    assert not fam_train & fam_held, f"held-out families trained on: {fam_train & fam_held}"
    assert len(fam_held) >= 6, f"only {len(fam_held)} held-out families"
    assert of(held, "family") <= fam_train


def write(path: Path, rows: list[dict[str, Any]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--model", default="smollm2-135m",
                        help="registered name or folder of the model that writes the answers")
    parser.add_argument("--name", default=BASE, help="file prefix (the base model's name)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--asks", type=int, nargs=3, default=[200, 96, 72],
                        metavar=("TRAIN", "HELD", "FAMILIES"), help="prompts the model answers")
    parser.add_argument("--cap", type=int, nargs=3, default=[56, 26, 48],
                        metavar=("TRAIN", "HELD", "FAMILIES"), help="lines per family")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--cache", type=Path, default=None,
                        help="JSON file of answers by prompt (reruns skip generation)")
    parser.add_argument("--train-only", action="store_true",
                        help="answer and write only the training split (the same file a full "
                             "run writes), e.g. to start training while the rest generates")
    args = parser.parse_args(argv)
    REGISTRY.update(load_registry())
    rng = random.Random(args.seed)
    asks = {s: make_asks(rng, s, n) for s, n in zip(("train", "held", "families"), args.asks,
                                                    strict=True)}
    splits = ("train",) if args.train_only else ("train", "held", "families")
    generate([a for s in splits for a in asks[s]], args.model, args.max_new_tokens,
             args.batch, args.cache)
    rows = {}
    for split, cap in zip(splits, args.cap, strict=False):
        rows[split] = balance(rng, candidates(rng, asks[split], args.name), cap)
    if not args.train_only:
        check_disjoint(rows["train"], rows["held"], rows["families"])
    names = {"train": f"{args.name}.train.jsonl", "held": f"{args.name}.jsonl",
             "families": f"{args.name}.families.jsonl"}
    for split, rs in rows.items():
        digest = write(args.out / names[split], rs)
        fams = sorted({r["family"] for r in rs})
        natural = sum("+edit" not in r["source"] and r["source"] != "template" for r in rs)
        print(f"{args.out / names[split]}: {len(rs)} lines ({natural} unedited model answers), "
              f"{len(fams)} families, sha256 {digest}...")
        for fam in fams:
            n = sum(r["family"] == fam for r in rs)
            if n < 12:
                print(f"  warning: {fam}: only {n} balanced lines")


if __name__ == "__main__":
    main()
