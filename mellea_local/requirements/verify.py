"""Route what a program can verify: a requirement's text mapped to one exact program.

A 135 M model should not guess whether a text has at most 12 words. ``map_requirement`` maps a
requirement's WHOLE text to one program and its kwargs, but only when one of a set of anchored
patterns matches the entire text ("Keep it under 50 words.", "No commas, please.", "Reply in
JSON.", "End with a question."). Anything else, including every text that merely mentions a
verifiable property among others ("The output is a JSON object with the keys ...", "two or
three sentences at most"), negated, hedged or approximate texts ("ideally under 50 words",
"about 100 words") and unquoted words ("mentions pricing": a paraphrase may meet it), maps to
``None`` and the model decides. Routing is the default of ``validate``, ``Requirement.validate``,
``session.validate`` and ``mellea-local check`` (``route=False`` / ``--no-route`` turn it off).

The programs are of two kinds:

- a verifier of Google's IFEval instruction registry (its ``INSTRUCTION_DICT`` ids, e.g.
  ``length_constraints:number_words``): ``verify`` runs the registry's own
  ``check_following``, never a re-implementation. Every verifier's own ``build_description``
  text maps to it (the field's canonical wording), beside the user phrasings. The registry
  comes from the optional ``[verify]`` extra (``if-verifiable``, whose ``ifeval`` module needs
  ``immutabledict``, ``langdetect`` and ``nltk``); without it these are not routed and one
  logged warning per process says so. ``langdetect`` is seeded (``DetectorFactory.seed = 0``)
  so a verdict repeats. The two verifiers that need NLTK's ``punkt`` model (sentence counts,
  all-capital words) are replaced by rules counting as IFEval does without it (its regex
  sentence splitter); nothing is ever downloaded. "Repeat the request word for word" is
  checked against the user's last message (``route``'s ``prompt``).
- our own exact rules (``rule:*``, ``OWN_RULES``) for types users write that the registry lacks
  or reads differently: starts with a quoted phrase, ends with a question, at least / at most N
  bullets, N paragraphs (blank lines), a fenced code block, a number, no "!", no e-mail address,
  all lower / upper case in any language (the registry's case verifiers also require English),
  quoted words as whole words (the registry matches substrings), and sentence and all-capital
  word counts with IFEval's regex splitter (the registry's verifiers need punkt). Each
  rule's meaning is documented under ``OWN_RULES``; a ``reason`` names it ``rule <name>``.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
import types
import unicodedata
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

NEEDS_PUNKT = frozenset({"length_constraints:number_sentences",
                         "change_case:capital_word_frequency"})
# (Sentence counts are mapped to ``rule:sentences``, IFEval's regex splitter, never to the
# punkt verifier; it stays listed for a mapping made by hand.)
"""Verifiers that call NLTK's punkt model: refused unless punkt is already installed."""


@dataclass(frozen=True)
class Mapping:
    """One registry verifier and the kwargs its ``build_description`` takes."""

    verifier: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.verifier}({args})"

    @property
    def is_rule(self) -> bool:
        """Whether this is one of our own exact rules (``rule:*``), not a registry verifier:
        a rule needs no extra installed."""
        return self.verifier.startswith("rule:")

    def decider(self) -> str:
        """Who decides, as a ``reason`` says it: ``ifeval <id>(<kwargs>)`` or
        ``rule <name>(<kwargs>)``."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        if self.is_rule:
            return f"rule {self.verifier.removeprefix('rule:')}({args})"
        return f"ifeval {self}"


# ---------------------------------------------------------------- numbers
_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
          "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
NUMBER_WORDS: dict[str, int] = {w: i for i, w in enumerate(_UNITS)}
for _t, _tw in enumerate(_TENS):
    if _tw:
        NUMBER_WORDS[_tw] = _t * 10
        for _u in range(1, 10):
            NUMBER_WORDS[f"{_tw}-{_u and _UNITS[_u]}"] = _t * 10 + _u
            NUMBER_WORDS[f"{_tw} {_UNITS[_u]}"] = _t * 10 + _u
NUMBER_WORDS.update({"a hundred": 100, "one hundred": 100, "hundred": 100})
_NUM = (r"(?P<n>\d{1,4}|" + "|".join(sorted(map(re.escape, NUMBER_WORDS), key=len, reverse=True))
        + ")")


def _number(text: str) -> int:
    text = text.lower()
    return int(text) if text.isdigit() else NUMBER_WORDS[text]


# ---------------------------------------------------------------- patterns
# A requirement is matched whole, case-insensitively, after trimming spaces, a final "." or
# "!", and a trailing ", please". LEAD is an optional lead-in naming the answer as subject.
_NOUN = (r"(?:response|answer|reply|text|output|summary|message|e-?mail|letter|headline|caption"
         r"|description|bio|post|tweet|story|poem|explanation|note|translation|blurb|essay"
         r"|result|content|copy|draft|paragraph|recap|intro|introduction|update|announcement)")
_SUBJ = rf"(?:the|your|my|this|each) (?:whole |entire |full |final )?{_NOUN}"
_MODAL = r"(?:must|should|has to|needs to|will|is to|shall|must always|should always)"
_BE = (r"(?:be |is |are |have |has |need |needs |stay |stays |remain |remains |use |uses "
       r"|contain |contains |include |includes )")
LEAD = (rf"(?:(?:please )?(?:(?:make sure|ensure)(?: that)? )?"
        rf"(?:(?:{_SUBJ}|it|everything) (?:{_MODAL} )?{_BE}?|it's "
        rf"(?:written |given |formatted |kept )?|keep it |keep "
        rf"(?:it|{_SUBJ}) "
        rf"|be brief: |make it |write (?:it |the {_NOUN} |your {_NOUN} |everything )?|answer "
        rf"|respond |reply |use |stay |i want |i need |give |format it |format (?:{_SUBJ}) )?)")
_YOUR = r"(?:in )?your (?:entire )?response,? "
_Q = r"""(?:'[^'\n]{1,60}'|"[^"\n]{1,60}"|“[^”\n]{1,60}”)"""
_KWLIST = rf"(?P<kws>{_Q}(?:(?:, | and |, and ){_Q}){{0,5}})"
_ANYLIST = rf"(?P<kws>{_Q}(?:(?:, | and |, and | or |, or ){_Q}){{0,5}})"  # forbidden: and/or
_LANGS = {"french": "fr", "german": "de", "spanish": "es", "italian": "it",
          "portuguese": "pt", "dutch": "nl", "russian": "ru", "chinese": "zh-cn",
          "japanese": "ja", "korean": "ko", "arabic": "ar", "hindi": "hi", "swedish": "sv",
          "polish": "pl", "turkish": "tr", "greek": "el", "czech": "cs", "danish": "da",
          "finnish": "fi", "norwegian": "no", "romanian": "ro", "hungarian": "hu",
          "indonesian": "id", "vietnamese": "vi", "thai": "th", "hebrew": "he",
          "ukrainian": "uk", "persian": "fa", "catalan": "ca", "bulgarian": "bg",
          "bengali": "bn", "urdu": "ur", "tamil": "ta", "telugu": "te", "nepali": "ne",
          "swahili": "sw", "kannada": "kn", "marathi": "mr", "gujarati": "gu", "punjabi": "pa",
          "malayalam": "ml"}


def _quoted(text: str) -> list[str]:
    return [a or b or c for a, b, c in re.findall(r"""'([^']+)'|"([^"]+)"|“([^”]+)”""", text)]


def _plain(words: list[str]) -> bool:
    # The registry uses keywords as regular expressions: route only literal words.
    return bool(words) and all(re.fullmatch(r"[\w][\w '\-]*", w) for w in words)


_Rule = tuple[str, str, Any]
RULES: list[_Rule] = []


def _rule(verifier: str, *patterns: str):
    def add(build):
        for p in patterns:
            RULES.append((verifier, LEAD + p, build))
        return build
    return add


_WORDS = (r"words?(?: long| in (?:total|length)| total| in the (?:reply|response|answer))?"
          r"(?: max(?:imum)?)?")


@_rule("length_constraints:number_words",
       rf"(?:in |with )?(?:under|below|fewer than|less than|shorter than) {_NUM} {_WORDS}")
def _words_under(m):
    return {"relation": "less than", "num_words": _number(m["n"])}


@_rule("length_constraints:number_words",
       rf"(?:in |with |to )?(?:at most|no more than|not more than|(?:a )?max(?:imum)?(?: of)?"
       rf"|up to|no longer than|not longer than|within) {_NUM} {_WORDS}",
       rf"{_NUM} words or (?:fewer|less|under)",
       rf"{_NUM} words? max(?:imum)?",
       rf"(?:a |an )?{_NUM}[- ]word (?:limit|maximum|max)",
       rf"(?:the )?word limit(?: is)?:? {_NUM}(?: words)?",
       rf"limit (?:it|yourself|{_SUBJ}) to {_NUM} words")
def _words_at_most(m):  # "at most N" is "fewer than N + 1"
    return {"relation": "less than", "num_words": _number(m["n"]) + 1}


@_rule("length_constraints:number_words",
       rf"(?:in |with )?(?:at least|no fewer than|no less than|(?:a )?minimum(?: of)?) {_NUM} "
       rf"{_WORDS}",
       rf"{_NUM} (?:or more words|words or more)(?: in the (?:reply|response|answer))?")
def _words_at_least(m):
    return {"relation": "at least", "num_words": _number(m["n"])}


# Sentences are counted by IFEval's own regex splitter (``instructions_util.split_into_sentences``,
# from the [verify] extra): the registry's verifier needs NLTK's punkt model, which is never
# downloaded here; the labelled data of ``scripts/make_ifeval_checks.py`` counts the same way.
_SENT = r"sentences?(?: long| in (?:total|length)| total)?"


@_rule("rule:sentences",
       rf"(?:in |with )?(?:under|below|fewer than|less than) {_NUM} {_SENT}",
       rf"{_YOUR}should contain less than {_NUM} sentences")
def _sentences_under(m):
    return {"relation": "less than", "num_sentences": _number(m["n"])}


@_rule("rule:sentences",
       rf"(?:in |with |to )?(?:at most|no more than|not more than|up to|(?:a )?max(?:imum)?"
       rf"(?: of)?|no longer than) {_NUM} {_SENT}",
       rf"{_NUM} {_SENT} (?:max(?:imum)?|or (?:fewer|less))")
def _sentences_at_most(m):
    return {"relation": "at most", "num_sentences": _number(m["n"])}


@_rule("rule:sentences",
       rf"(?:in |with )?(?:at least|no fewer than|no less than|(?:a )?minimum(?: of)?) {_NUM} "
       rf"{_SENT}",
       rf"{_NUM} (?:or more sentences|sentences or more)",
       rf"{_YOUR}should contain at least {_NUM} sentences")
def _sentences_at_least(m):
    return {"relation": "at least", "num_sentences": _number(m["n"])}


@_rule("rule:sentences",
       rf"(?:in |to |as |with |write |use )?(?:exactly |precisely |just |only )?{_NUM} {_SENT}"
       rf"(?:,? no more,? no less)?",
       r"(?:in |to |as |with |write |use )?(?:a single|just one|only one|one single) sentence")
def _sentences_exactly(m):
    n = _number(m["n"]) if m.groupdict().get("n") else 1
    return {"relation": "exactly", "num_sentences": n}


_CAPS = (r"(?:all caps|all capitals|all capital letters|all upper ?case(?: letters)?"
         r"|capital letters only|upper ?case letters only|only upper ?case letters"
         r"|in capital letters|in capitals|in block capitals|entirely (?:in )?upper ?case"
         r"|upper ?case(?: only)?"
         r"|caps only|block capitals)")
_EN = r"(?:in english|english)"


# "In English and in all capitals" is the registry's instruction (its verifier also asks
# langdetect for English); a plain "all caps" is not about the language, so it goes to the
# exact rule below (rule:uppercase: no lower-case letter), which a French answer can meet.
@_rule("change_case:english_capital",
       rf"(?:in |using |written in )?{_CAPS},? (?:and )?{_EN}",
       rf"(?:in )?{_EN},? (?:and )?(?:in |using )?{_CAPS}")
def _caps_en(m):
    return {}


@_rule("rule:uppercase",
       rf"(?:in |using |written in |all in |written entirely in )?{_CAPS}",
       r"every letter (?:has to|must|should|is) (?:be )?(?:upper ?case|a capital(?: letter)?"
       r"|capitalized)",
       r"(?:no|not use any|use no|uses no|contain no|contains no|without(?: any)?) lower ?case "
       r"letters(?: at all)?",
       r"(?:don't|do not|never) use (?:any )?lower ?case(?: letters)?")
def _caps(m):
    return {}


_LOWER = (r"(?:all lower ?case(?: letters)?|lower ?case(?: letters)? only|only lower ?case letters"
          r"|entirely (?:in )?lower ?case|(?:all )?in lower ?case(?: letters)?|lower ?case"
          r"|all small letters|small letters only|only lower ?case(?: letters)?)")


@_rule("change_case:english_lowercase",
       rf"(?:in |using |written )?{_LOWER},? (?:and )?{_EN}",
       rf"(?:in )?{_EN},? (?:and )?(?:in |using |written )?{_LOWER}")
def _lower_en(m):
    return {}


@_rule("rule:lowercase",
       rf"(?:in |using |written |written in )?{_LOWER}",
       r"(?:no|not use any|use no|uses no|contain no|contains no|without(?: any)?) (?:capital "
       r"letters|capitals|caps|upper ?case letters|upper ?case)(?: at all)?",
       r"(?:don't|do not|never) (?:use )?(?:any )?(?:capital letters|capitals|caps|upper ?case"
       r"(?: letters)?)(?: at all)?",
       r"(?:don't|do not|never) capitali[sz]e anything",
       r"every (?:character|letter) (?:has to|must|should|is) (?:be )?lower ?case")
def _lower(m):
    return {}


@_rule("punctuation:no_comma",
       r"(?:no|not use any|use no|uses no|contain no|contains no|without(?: any)?|zero) commas"
       r"(?: at all| whatsoever)?",
       r"(?:don't|do not|never|doesn't|does not|must not|should not) (?:use|contain|include|have)"
       r" (?:any )?commas(?: at all)?",
       r"avoid(?: using)? (?:any )?commas(?: completely| entirely| altogether)?",
       r"refrain from using (?:a single comma|any commas)",
       r"comma-free", r"no commas? (?:allowed|anywhere)")
def _no_comma(m):
    return {}


_WHOSE = rf"(?: (?:it|(?:the|your) {_NOUN}))?"


@_rule("startend:end_checker",
       rf"(?:end|finish|close|conclude|sign off){_WHOSE} with the "
       r"(?:exact )?phrase:? (?P<p>.{2,80}?)(?: and nothing (?:after|else)(?: it)?[.!]?)?",
       rf"(?:end|finish|close|conclude|sign off){_WHOSE} with "
       rf"(?P<p>{_Q})(?:[.!]| and nothing (?:after|else)(?: it)?[.!]?)?",
       rf"(?:{_SUBJ} )?(?:(?:{_MODAL}) )?(?:ends?|finish(?:es)?|signs? off|closes?) with "
       rf"(?P<p>{_Q})[.!]?",
       r"(?:ends?|finish(?:es)?) with the (?:exact )?phrase:? (?P<p>.{2,80}?)",
       r"the (?:final|last) words (?:must|should) be:? (?P<p>.{2,80}?)")
def _end(m):
    phrase = m["p"].strip()
    if phrase[:1] in "'\"“" and len(_quoted(phrase)) == 1:
        phrase = _quoted(phrase)[0]
    return {"end_phrase": phrase} if phrase.strip(" '\"“”") == phrase else None


@_rule("rule:starts_with",
       rf"(?:start|begin|open){_WHOSE} with (?P<p>{_Q})",
       rf"(?:{_SUBJ} )?(?:(?:{_MODAL}) )?(?:starts?|begins?|opens?) with (?P<p>{_Q})",
       rf"the (?:first words?|opening words?) (?:must|should|has to|is|are) (?P<p>{_Q})")
def _start(m):
    [phrase] = _quoted(m["p"])
    return {"start_phrase": phrase} if phrase.strip() == phrase and phrase else None


_ASKER = r"(?: (?:to|for) the (?:user|customer|reader|client|recipient))?"


@_rule("rule:ends_with_question",
       rf"(?:end|finish|close|conclude){_WHOSE} (?:with|on) a (?:(?:follow-up|closing) )?"
       rf"question(?: mark)?{_ASKER}",
       rf"(?:{_SUBJ} )?(?:(?:{_MODAL}) )?(?:ends?|finish(?:es)?|closes?|concludes?) (?:with|on) a "
       rf"(?:(?:follow-up|closing) )?question(?: mark)?{_ASKER}",
       rf"the (?:last|final) (?:sentence|line)(?: of (?:the|your) {_NOUN})? (?:{_MODAL} be|is) a "
       rf"question{_ASKER}",
       rf"(?:end|finish|close|conclude){_WHOSE} by asking (?:a question|something)"
       rf"{_ASKER}",
       r"(?:end|finish|close)(?: it)? with '\?'",
       rf"ask (?:a|one) (?:(?:follow-up|closing) )?question at the end{_ASKER}")
def _question(m):
    return {}


_DQ = r"(?:\"?double quot(?:es|ation marks)\"?|\"double quotes\")"


@_rule("startend:quotation",
       rf"(?:wrap|enclose|put) (?:(?:the|your) (?:entire |whole |full )?{_NOUN}|it|everything) "
       rf"(?:in|inside|within|between) {_DQ}",
       rf"(?:wrapped|enclosed) (?:entirely )?in {_DQ}")
def _quotes(m):
    return {}


_NOPROSE = (r"(?:,? (?:and )?(?:no|without(?: any)?) (?:prose|other text|extra text|explanations?|"
            r"commentary|markdown|comments|text around it)| and nothing else)?")


@_rule("detectable_format:json_format",
       rf"(?:in |as )?(?:valid |parseable |well-formed |pure |strict )?json(?: only)?{_NOPROSE}",
       rf"only (?:valid )?json{_NOPROSE}", r"entirely in json", r"json format(?:ted)?",
       r"(?:in |as )?(?:a |one )?(?:valid |parseable |well-formed )?json (?:document|format)",
       rf"(?:return|output|respond with|reply with|answer with|format (?:it )?as|formatted as) "
       rf"(?:only |valid |only valid )?json(?: only)?{_NOPROSE}",
       r"return everything as (?:valid |parseable )?json",
       rf"(?:return|give|format|output|write) (?:the|your) {_NOUN} (?:as|in) (?:valid |parseable )?"
       rf"json(?: only)?{_NOPROSE}",
       r"wrapped in json")
def _json(m):
    return {}


@_rule("detectable_format:number_bullet_lists",
       rf"(?:with )?(?:exactly|precisely) {_NUM} (?:markdown )?bullet(?:ed)? (?:points|items)"
       r"(?: using '\* ')?",
       rf"(?:with )?{_NUM} (?:markdown )?bullet(?:ed)? (?:points|items), no more,? no less",
       rf"(?:as )?exactly {_NUM} markdown bullets")
def _bullets(m):
    return {"num_bullets": _number(m["n"])}


_BULLETS = r"(?:markdown )?(?:bullet(?:ed)? (?:points?|items?|list items?)|bullets?)"


@_rule("rule:bullets",
       rf"(?:with |in |as |use |give |list |include )?(?:at least|no fewer than|a minimum of) "
       rf"{_NUM} {_BULLETS}",
       rf"(?:with |use |give |list |include )?{_NUM} or more {_BULLETS}")
def _bullets_at_least(m):
    return {"relation": "at least", "num_bullets": _number(m["n"])}


@_rule("rule:bullets",
       rf"(?:with |in |as |use |give |list |include )?(?:at most|no more than|up to|a maximum of)"
       rf" {_NUM} {_BULLETS}",
       rf"(?:with |use |give |list |include )?{_NUM} {_BULLETS} or (?:fewer|less)",
       rf"{_NUM} {_BULLETS} max(?:imum)?")
def _bullets_at_most(m):
    return {"relation": "at most", "num_bullets": _number(m["n"])}


_PARA = r"paragraphs?(?: long| only| total)?"


@_rule("rule:paragraphs",
       rf"(?:in |as |to |into |write |use )?(?:one|a single|1|just one|only one|a single short) "
       rf"{_PARA}",
       rf"(?:in |as |to |into |write |use )?exactly {_NUM} {_PARA}",
       rf"(?:in |as |into |write |use ){_NUM} {_PARA}")
def _paragraphs_exactly(m):
    n = _number(m["n"]) if m.groupdict().get("n") else 1
    return {"relation": "exactly", "num_paragraphs": n}


@_rule("rule:paragraphs",
       rf"(?:in |to )?(?:at most|no more than|up to|a maximum of) {_NUM} {_PARA}",
       rf"{_NUM} {_PARA} (?:max(?:imum)?|or (?:fewer|less))")
def _paragraphs_at_most(m):
    return {"relation": "at most", "num_paragraphs": _number(m["n"])}


@_rule("rule:paragraphs",
       rf"(?:in )?(?:at least|no fewer than|a minimum of) {_NUM} {_PARA}",
       rf"{_NUM} or more {_PARA}")
def _paragraphs_at_least(m):
    return {"relation": "at least", "num_paragraphs": _number(m["n"])}


_FENCE = r"(?:a |at least one |one )?(?:markdown |fenced |triple-backtick )?code blocks?"


@_rule("rule:code_block",
       rf"(?:contains?|includes?|has|have|with|uses?|shows?) {_FENCE}",
       rf"(?:put|wrap|format|place|show) (?:the |all |all the |any )?code (?:in|inside|as) "
       rf"{_FENCE}",
       rf"(?:the )?code (?:is |goes |must be |should be )?(?:in|inside) {_FENCE}")
def _code(m):
    return {}


@_rule("rule:number",
       r"(?:contains?|includes?|has|have|mentions?|gives?|uses?|states?) (?:a|at least one|one "
       r"or more|some) (?:specific |concrete |actual )?(?:number|numeral|numeric value)s?",
       r"(?:contains?|includes?|has|have|mentions?|gives?|uses?) (?:specific |concrete )?numbers")
def _number_rule(m):
    return {"digits_only": False}


@_rule("rule:number",
       r"(?:contains?|includes?|has|have|uses?) (?:a|at least one|one or more|some) digits?")
def _digit_rule(m):
    return {"digits_only": True}


_EMAIL = r"e-?mail address(?:es)?"


@_rule("rule:no_email",
       rf"(?:does not|doesn't|do not|don't|must not|should not|never) (?:include|contain|reveal"
       rf"|show|give|list|mention|use) (?:any|an) {_EMAIL}",
       rf"(?:no|contains no|includes no|without(?: any)?) {_EMAIL}(?: at all)?")
def _no_email(m):
    return {}


@_rule("rule:no_exclamation",
       r"(?:no|not use any|use no|uses no|contain no|contains no|without(?: any)?|zero) "
       r"exclamation (?:marks|points)(?: at all)?",
       r"(?:don't|do not|never|doesn't|does not|must not|should not) (?:use|contain|include|have)"
       r" (?:any )?exclamation (?:marks|points)(?: at all)?",
       r"avoid(?: using)? (?:any )?exclamation (?:marks|points)")
def _no_exclamation(m):
    return {}


_WORDQ = (r"(?: the (?:key)?(?:words?|terms?|phrases?|name|product name|brand name|company "
          r"name))?")
_WHERE = (rf"(?: somewhere| at least once| in (?:the|your) {_NOUN}| in what you write"
          rf"| (?:in )?(?:the )?(?:text|answer|response|reply))?")


# A user's "include the word 'art'" means the word: the registry's existence verifier searches
# the keyword anywhere ("start" has "art", "said" has "ai"), so these phrasings go to our
# rule:includes (whole words, a plural -s/-es or possessive 's allowed); the registry's own
# instruction text ("Include keywords [...] in the response.") keeps its verifier.
@_rule("rule:includes",
       rf"(?:include|mention|contain|use|mentions|includes|contains|uses|say|says){_WORDQ} "
       rf"{_KWLIST}{_WHERE}",
       rf"(?:make sure |ensure )?(?:that )?(?:the (?:key)?(?:words?|terms?|phrases?) )?{_KWLIST} "
       rf"(?:appears?|is used|are used|is mentioned|are mentioned|is included|are included"
       rf"|(?:must|should|has to|have to) (?:appear|be used|be mentioned|be included))"
       rf"(?: somewhere| at least once)?(?: in (?:the|your) {_NOUN})?",
       r"include the keywords? (?P<plain>[a-z][\w\-]*(?:(?:, | and |, and )[a-z][\w\-]*){0,5})")
def _includes(m):
    g = m.groupdict()
    words = _quoted(g["kws"]) if g.get("kws") else re.split(r", and |, | and ", g["plain"])
    return {"keywords": words} if _plain(words) else None


@_rule("keywords:forbidden_words",
       rf"(?:(?:does|do|must|should|shall) not|doesn't|don't|never|mustn't|shouldn't) "
       r"(?:use|include|say|write|mention|contain)"
       rf"{_WORDQ} {_ANYLIST}(?: anywhere| at all)?",
       rf"avoid (?:saying |using |mentioning )?(?:the words? )?{_ANYLIST}",
       rf"without (?:using |saying |mentioning )?(?:the words? )?{_ANYLIST}",
       rf"(?:the (?:words?|terms?|phrases?) )?{_ANYLIST} (?:(?:must|should|does|do) not|doesn't|"
       r"don't|never|mustn't|shouldn't) (?:show up|appear|be used|be mentioned)"
       r"(?: at all| anywhere)?",
       rf"(?:the (?:words?|terms?|phrases?) )?{_ANYLIST} (?:is|are) (?:not|never) "
       r"(?:used|mentioned)",
       rf"keep {_ANYLIST} out of (?:the|your) {_NOUN}(?: entirely)?",
       rf"leave out {_ANYLIST}", rf"no mention of {_ANYLIST}")
def _forbidden(m):
    words = _quoted(m["kws"])
    return {"forbidden_words": words} if _plain(words) else None


@_rule("rule:frequency",  # whole words, as rule:includes (the registry counts substrings)
       rf"(?:use|say|mention|include) (?:the word )?(?P<w>{_Q}) (?:at least|no fewer than) "
       rf"{_NUM} times",
       rf"(?:use|say|mention|include) (?:the word )?(?P<w>{_Q}) (?:fewer|less) than {_NUM} times",
       rf"(?:use|say|mention|include|uses|says|mentions|includes) (?:the word )?(?P<w>{_Q}) "
       rf"at least (?P<times>once|twice|thrice)")
def _frequency(m):
    if m.groupdict().get("times"):
        [word] = _quoted(m["w"])
        n = {"once": 1, "twice": 2, "thrice": 3}[m["times"].lower()]
        return {"keyword": word, "frequency": n, "relation": "at least"} if _plain([word]) \
            else None
    [word] = _quoted(m["w"])
    rel = "at least" if re.search(r"at least|no fewer", m[0], re.I) else "less than"
    return {"keyword": word, "frequency": _number(m["n"]), "relation": rel} if _plain([word]) \
        else None


@_rule("detectable_format:title",
       r"(?:with |include |add |start with |give it )?a (?:title|heading) (?:wrapped |enclosed )?"
       r"(?:in|inside|within) (?:<<)?double ang(?:ular|le) brackets(?:>>)?(?:, (?:like|such as) "
       r"<<title>>)?",
       r"(?:with |include |add |start with |give it )?a (?:title|heading) (?:wrapped |enclosed )?"
       r"(?:in|inside|within) (?:<< and >>|<< ?>>)",
       r"(?:with |include |add |start with |give it |has |have |contains? |includes? )?a "
       r"(?:title|heading) (?:wrapped |enclosed )?(?:in|inside|within) double ang(?:ular|le) "
       r"brackets(?:,? (?:like|such as|e\.g\.) <<[^>\n]{1,40}>>)?")
def _title(m):
    return {}


@_rule("detectable_content:postscript",
       r"(?:add|include|end with|finish with) a postscript (?:starting|beginning) with "
       r"(?P<m>p\.\s?(?:p\.\s?)?s\.?)(?: at the end)?",
       r"(?:end|finish)(?: off)? with a (?P<m>p\.\s?(?:p\.\s?)?s\.?) (?:line|note)(?: after the "
       r"main text"
       r"| at the end)?",
       r"(?:add|include|end with|finish with|sign off with|with|has|have|contains?) a "
       r"(?P<m>p\.s\.?|p\.p\.s)(?: (?:line|note))?(?: at the (?:end|bottom))?",
       rf"(?:{_SUBJ} )?(?:(?:{_MODAL}) )?(?:ends?|finish(?:es)?) with a (?P<m2>p\.s\.?|p\.p\.s)"
       rf"(?: (?:line|note))?")
def _postscript(m):
    # The registry reads "P.S." and "P.P.S" literally and any other marker as a regex, where a
    # lower-case "p.s." would match "p", any character, "s": so the marker is upper-cased.
    marker = (m.groupdict().get("m") or m["m2"]).upper()
    return {"postscript_marker": "P.S." if marker == "P.S" else marker}


@_rule("detectable_content:number_placeholders",
       rf"(?:put in |include |leave |use )?(?:at least|no fewer than) {_NUM} "
       r"(?:placeholders|bracketed fields) "
       r"(?:in square brackets|such as \[\w+\]|like \[\w+\])(?:,? (?:such as|like) \[\w+\])?")
def _placeholders(m):
    return {"num_placeholders": _number(m["n"])}


@_rule("language:response_language",
       rf"(?:in |using |written in |written entirely in |entirely in |only in |written only in )"
       rf"(?P<lang>{'|'.join(_LANGS)})"
       rf"(?: only)?(?:, no other language| \(no other language\))?",
       rf"(?:{_SUBJ} )?(?:(?:{_MODAL}) )?(?:be )?(?:written )?(?:in )?(?P<lang2>{'|'.join(_LANGS)})"
       rf" only")
def _language(m):
    return {"language": _LANGS[(m.groupdict().get("lang") or m["lang2"]).lower()]}


@_rule("combination:two_responses",
       r"give two different (?:responses|answers)\. responses and only responses should be "
       r"separated by 6 asterisk symbols: \*{6}",
       r"give two different (?:responses|answers),? separated by (?:six|6) asterisks(?: "
       r"\(\*{6}\))?")
def _two(m):
    return {}


_OPTIONS = r"'my answer is yes\.', 'my answer is no\.',? (?:or )?'my answer is maybe\.'"


@_rule("detectable_format:constrained_response",
       rf"answer with one of the following options: \(?{_OPTIONS}\)?",
       rf"(?:say|answer with|reply with) {_OPTIONS}")
def _constrained(m):
    return {}


@_rule("detectable_format:multiple_sections",
       rf"{_SUBJ} must have {_NUM} sections\. mark the beginning of each section with "
       r"(?P<sp>section|part|chapter|paragraph|slide) x, such as: (?P=sp) 1 \[content of section "
       r"1\] "
       r"(?P=sp) 2 \[content of section 2\]",
       rf"split (?:the|your) (?:answer|response|reply) into {_NUM} (?:parts|sections) headed "
       r"'(?P<sp2>section|part|chapter|paragraph|slide) 1', '(?P=sp2) 2',? and so on")
def _sections(m):
    return {"section_spliter": m.groupdict().get("sp") or m["sp2"],
            "num_sections": _number(m["n"])}


@_rule("detectable_format:number_highlighted_sections",
       rf"highlight at least {_NUM} (?:sections|parts)(?: in your (?:answer|response))? with "
       r"markdown"
       r"(?:, i\.e\. \*highlighted section\*|, like \*this\*|, such as \*highlighted section\*)?")
def _highlights(m):
    return {"num_highlights": _number(m["n"])}


@_rule("length_constraints:number_paragraphs",
       rf"(?:write |use |give )?exactly {_NUM} paragraphs,? separated by \*\*\*")
def _paragraphs(m):
    return {"num_paragraphs": _number(m["n"])}


_LETTER = r"(?:the letter (?P<l>'[a-z]'|\"[a-z]\"|[a-z]))"


@_rule("keywords:letter_frequency",
       rf"(?:in your (?:response|answer|reply), )?{_LETTER} should appear "
       rf"(?P<rel>at least|less than|fewer than) {_NUM} times",
       rf"use {_LETTER} (?P<rel2>at least|less than|fewer than) {_NUM} times")
def _letters(m):
    g = m.groupdict()
    rel = (g.get("rel") or g["rel2"]).lower()
    return {"letter": m["l"].strip("'\"").lower(), "let_frequency": _number(m["n"]),
            "let_relation": "at least" if rel == "at least" else "less than"}


# ---------------------------------------------------------------- the registry's own texts
# Each verifier's own ``build_description`` text (the canonical IFEval instruction), matched
# whole, so a requirement written the way the field writes it routes to exactly its verifier.
# (The whitespace is collapsed and a final "." dropped before matching, as for every pattern.)
_PYLIST = r"\[(?P<lst>'[^'\n]{1,40}'(?:, '[^'\n]{1,40}'){0,9})\]"


def _pylist(m) -> list[str] | None:
    words = re.findall(r"'([^']+)'", m["lst"])
    return words if _plain(words) else None


# The registry's verifier tokenizes with NLTK's punkt; ours counts the same all-capital
# tokens with IFEval's regex sentence splitter and NLTK's punkt-free Treebank tokenizer (the way
# scripts/make_ifeval_checks.py labelled them). "Use fewer than 5 words in ALL CAPS" is not
# mapped: it also reads as "fewer than 5 words, all in capitals".
@_rule("rule:capital_words",
       rf"{_YOUR}words with all capital letters should appear (?P<rel>at least|less than) "
       rf"{_NUM} times",
       rf"(?:use |include |with |contains? )?(?P<rel2>at least|fewer than|less than) {_NUM} "
       r"(?:all-caps|all caps|all-capital|fully capitali[sz]ed) words")
def _desc_capital_words(m):
    rel = (m.groupdict().get("rel") or m["rel2"]).lower()
    return {"relation": "at least" if rel == "at least" else "less than",
            "num_words": _number(m["n"])}


@_rule("change_case:english_lowercase",
       r"your entire response should be in english,? and in all lower ?case letters\. no capital "
       r"letters are allowed")
def _desc_lower(m):
    return {}


@_rule("detectable_content:number_placeholders",
       rf"the response must contain at least {_NUM} placeholders represented by square brackets,"
       r" such as \[[^\]\n]{1,40}\]")
def _desc_placeholders(m):
    return {"num_placeholders": _number(m["n"])}


@_rule("detectable_content:postscript",
       r"at the end of your response, please explicitly add a postscript starting with "
       r"(?P<m>p\.\s?s\.?|p\.\s?p\.\s?s\.?)")
def _desc_postscript(m):
    marker = m["m"].upper().replace(" ", "")
    return {"postscript_marker": "P.S." if marker.rstrip(".") == "P.S" else "P.P.S"}


@_rule("detectable_format:json_format",
       r"entire output should be wrapped in json format\. you can use markdown ticks such as ```")
def _desc_json(m):
    return {}


@_rule("detectable_format:number_bullet_lists",
       rf"your answer must contain exactly {_NUM} bullet points\. use the markdown bullet points "
       r"such as: \* this is point \d+\. \* this is point \d+")
def _desc_bullets(m):
    return {"num_bullets": _number(m["n"])}


@_rule("detectable_format:title",
       r"your answer must contain a title, wrapped in double angular brackets, such as "
       r"<<[^>\n]{1,60}>>")
def _desc_title(m):
    return {}


@_rule("keywords:existence", rf"include keywords {_PYLIST} in the response")
def _desc_keywords(m):
    words = _pylist(m)
    return None if words is None else {"keywords": words}


@_rule("keywords:forbidden_words", rf"do not include keywords {_PYLIST} in the response")
def _desc_forbidden(m):
    words = _pylist(m)
    return None if words is None else {"forbidden_words": words}


@_rule("keywords:frequency",
       rf"{_YOUR}the word (?P<w>[a-z][\w'\-]{{0,30}}) should appear (?P<rel>at least|less than) "
       rf"{_NUM} times")
def _desc_frequency(m):
    return {"keyword": m["w"], "frequency": _number(m["n"]), "relation": m["rel"].lower()}


@_rule("language:response_language",
       rf"your entire response should be in (?P<lang>{'|'.join(_LANGS)}|english) language, no "
       r"other language is allowed")
def _desc_language(m):
    name = m["lang"].lower()
    return {"language": "en" if name == "english" else _LANGS[name]}


@_rule("length_constraints:nth_paragraph_first_word",
       rf"there should be {_NUM} paragraphs\. paragraphs and only paragraphs are separated with "
       r"each other by two new lines as if it was '\\n\\n' in python\. paragraph (?P<k>\d{1,2}) "
       r"must start with word (?P<w>[a-z][\w\-]{0,30})")
def _desc_nth_paragraph(m):
    n, k = _number(m["n"]), int(m["k"])  # k > n is the registry's own (unmeetable) text
    if k < 1:
        return None
    return {"num_paragraphs": n, "nth_paragraph": k, "first_word": m["w"].lower()}


@_rule("length_constraints:number_paragraphs",
       rf"there should be {_NUM} paragraphs\. paragraphs are separated with the markdown divider:"
       r" \*\*\*")
def _desc_paragraphs(m):
    return {"num_paragraphs": _number(m["n"])}


@_rule("punctuation:no_comma",
       r"in your entire response, refrain from the use of any commas")
def _desc_comma(m):
    return {}


@_rule("startend:end_checker",
       r"finish your response with this exact phrase (?P<p>\S.{0,80}?)\. no other words should "
       r"follow this phrase\.?")
def _desc_end(m):
    return {"end_phrase": m["p"]}


REPEAT = "combination:repeat_prompt"


@_rule(REPEAT,
       r"first repeat the request word for word without change, then give your answer \(1\. do "
       r"not say any words or characters before repeating the request; 2\. the request you need "
       r"to repeat does not include this sentence\)",
       r"first repeat (?:my|the|the user's) (?:request|question) word for word(?: without "
       r"change)?,? (?:and )?then (?:answer it|give your answer|answer)")
def _desc_repeat(m):
    return {}  # the request itself comes from the conversation (``route``'s prompt)


@_rule("startend:quotation", r"wrap your entire response with double quotation marks")
def _desc_quotes(m):
    return {}


_COMPILED = [(v, re.compile(p, re.IGNORECASE), b) for v, p, b in RULES]


def _normal(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r",? (?:please|pls|plz)[.!]?$", "", text, flags=re.IGNORECASE)
    text = re.sub(r"^(?:please|pls|plz),? ", "", text, flags=re.IGNORECASE)
    return re.sub(r"[.!]+$", "", text).strip()


def map_requirement(text: str) -> Mapping | None:
    """The program that decides ``text`` (a registry verifier or our rule), or ``None`` when no
    mapping is confident.

    Confident means exactly one program's anchored patterns match the whole text (with the
    same kwargs, if several patterns match). Ambiguous or partial matches give ``None``.
    """
    if not isinstance(text, str) or len(text) > 300:
        return None
    raw = re.sub(r"\s+", " ", text).strip()
    norm = _normal(text)
    found: set[_Frozen] = set()
    for verifier, pattern, build in _COMPILED:
        # An end phrase keeps its own final punctuation ("... must be: Hope that helps.").
        m = pattern.fullmatch(raw if verifier == "startend:end_checker" else norm)
        if m is None:
            continue
        kwargs = build(m)
        if kwargs is None:
            return None
        found.add(_Frozen(verifier, kwargs))
    if len(found) != 1:
        return None
    [one] = found
    return Mapping(one.verifier, one.unfrozen())


@dataclass(frozen=True)
class _Frozen:
    verifier: str
    items: tuple[tuple[str, Any], ...]

    def __init__(self, verifier: str, kwargs: dict[str, Any]):
        object.__setattr__(self, "verifier", verifier)
        object.__setattr__(self, "items", tuple(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(kwargs.items())))

    def unfrozen(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.items}


# ---------------------------------------------------------------- our own exact rules
# Requirement types users write that the registry lacks (or gets wrong for a plain phrasing),
# each an exact program over the answer text. Their definitions are the documented meaning of
# the routed phrasings (README, "Requirement checks"); the reason names them ``rule <name>``.
_CLOSERS = "\"'”’)]*_ \t\r\n"
_BULLET_LINE = re.compile(r"^[ \t]*(?:[-*+•])[ \t]+\S", re.MULTILINE)
_FENCED = re.compile(r"^[ \t]*(```|~~~)[^\n]*\n.*?^[ \t]*\1", re.MULTILINE | re.DOTALL)
_CARDINALS = ("zero two three four five six seven eight nine ten eleven twelve thirteen fourteen "
              "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy "
              "eighty ninety hundred thousand million billion trillion dozen")
_EMAIL_ADDRESS = re.compile(r"[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+")
_NUMBER_WORD = re.compile(rf"\b(?:{'|'.join(_CARDINALS.split())})\b", re.IGNORECASE)


def _word_pattern(word: str) -> str:
    return rf"(?<!\w){re.escape(word)}(?:s|es|'s|’s)?(?!\w)"


def _has_word(answer: str, word: str) -> bool:
    """``word`` (or phrase) as whole words, case-insensitively; a plural -s/-es or a possessive
    's may follow it."""
    return re.search(_word_pattern(word), answer, re.IGNORECASE) is not None


def _word_count(answer: str, word: str) -> int:
    """How many times ``_has_word`` matches."""
    return len(re.findall(_word_pattern(word), answer, re.IGNORECASE))


def paragraphs(answer: str) -> list[str]:
    """Blocks of text separated by at least one blank line (a line of only spaces counts)."""
    return [b for b in re.split(r"\n[ \t]*\n", answer.strip()) if b.strip()]


def _without_closers(answer: str) -> str:
    """``answer`` less what may trail its last sentence: spaces, closing quotes and brackets,
    emphasis marks and symbols such as emoji (Unicode category S)."""
    end = len(answer)
    while end and (answer[end - 1] in _CLOSERS
                   or unicodedata.category(answer[end - 1]).startswith("S")
                   or answer[end - 1] in "\ufe0f\u200d"):
        end -= 1
    return answer[:end]


def _compare(count: int, relation: str, n: int) -> bool:
    return {"exactly": count == n, "at most": count <= n, "at least": count >= n,
            "less than": count < n}[relation]


def _rule_starts_with(answer: str, start_phrase: str) -> bool:
    # Leading spaces and one opening double quote are ignored, case is not (as the registry's
    # end checker does for an end phrase).
    return answer.lstrip().lstrip('"“').lower().startswith(start_phrase.lower())


OWN_RULES: dict[str, Any] = {
    "rule:lowercase": lambda a: not any(ch.isupper() for ch in a),
    "rule:uppercase": lambda a: not any(ch.islower() for ch in a),
    "rule:starts_with": _rule_starts_with,
    "rule:ends_with_question": lambda a: _without_closers(a).endswith(("?", "？")),
    "rule:bullets": lambda a, relation, num_bullets: _compare(
        len(_BULLET_LINE.findall(a)), relation, num_bullets),
    "rule:paragraphs": lambda a, relation, num_paragraphs: _compare(
        len(paragraphs(a)), relation, num_paragraphs),
    "rule:code_block": lambda a: _FENCED.search(a) is not None,
    "rule:number": lambda a, digits_only: bool(re.search(r"\d", a)) or (
        not digits_only and _NUMBER_WORD.search(a) is not None),
    "rule:no_exclamation": lambda a: "!" not in a and "！" not in a,
    "rule:no_email": lambda a: _EMAIL_ADDRESS.search(a) is None,
    "rule:includes": lambda a, keywords: all(_has_word(a, k) for k in keywords),
    "rule:sentences": lambda a, relation, num_sentences: _compare(
        len(_split_sentences(a)), relation, num_sentences),
    "rule:capital_words": lambda a, relation, num_words: _compare(
        sum(w.isupper() for w in _words(a)), relation, num_words),
    "rule:frequency": lambda a, keyword, frequency, relation: _compare(
        _word_count(a, keyword), relation, frequency),
}
"""Our exact rules by id. ``lowercase``/``uppercase``: no upper-/lower-case letter at all (any
language; the registry's own case verifiers also ask langdetect for English, kept for phrasings
that say "in English"). ``starts_with``: the answer, after leading spaces and an opening double
quote, starts with the quoted phrase, case-insensitively. ``ends_with_question``: the last
character, after trailing spaces, quotes, brackets, emphasis marks and symbols (emoji), is a
question mark.
``bullets``: lines whose first non-blank character is ``-``, ``*``, ``+`` or ``•`` followed by a
space. ``paragraphs``: blocks separated by blank lines. ``code_block``: a fenced block (a line
opening with three backticks or tildes, closed by a later such line). ``number``: a digit, or a
cardinal number word (two .. trillion, zero, dozen; never "one", which is mostly not a count:
"one of", "no one"); ``digits_only`` for "contains a digit". ``no_exclamation``: no "!".
``no_email``: nothing of the form ``name@domain.tld``. ``includes``: every quoted word or phrase
appears as whole words, case-insensitively, a plural -s/-es or possessive 's allowed (the
registry's existence verifier matches any substring, so "start" would contain 'art');
``frequency``: the same whole-word matches, counted. ``capital_words``: tokens in all capitals
(``str.isupper``), tokenized as IFEval does but without punkt (Treebank over its regex
sentences). ``sentences``: IFEval's regex sentence
splitter (``instructions_util.split_into_sentences``; needs the [verify] extra)."""
NEEDS_REGISTRY = frozenset({"rule:sentences", "rule:capital_words"})
"""Our rules that use a piece of the registry (IFEval's sentence splitter): routed only with
the [verify] extra."""


def _words(answer: str) -> list[str]:
    """Word tokens as IFEval counts them, punkt-free: NLTK's Treebank tokenizer over IFEval's
    regex sentences."""
    import nltk

    treebank = nltk.tokenize.TreebankWordTokenizer()
    return [w for s in _split_sentences(answer) for w in treebank.tokenize(s)]


def _split_sentences(answer: str) -> list[str]:
    """IFEval's own regex sentence splitter (``instructions_util.split_into_sentences``)."""
    registry()  # enters the package the way the registry does (no datasets import)
    from if_verifiable.ifeval import instructions_util

    return instructions_util.split_into_sentences(answer)



# ---------------------------------------------------------------- the registry (extra)
_REGISTRY: dict[str, Any] | None = None
_WARNED = False
INSTALL = 'pip install "mellea-local[verify]"'


def registry() -> dict[str, Any] | None:
    """IFEval's ``INSTRUCTION_DICT`` (from ``if-verifiable``), or ``None`` without the extra.

    ``if_verifiable/__init__.py`` imports ``datasets`` for its benchmark loader, which the
    verifiers do not need: when the package is not imported yet it is entered through a bare
    package module (the same way ``scripts/make_ifeval_checks.py`` does). Warns once when the
    extra is missing.
    """
    global _REGISTRY, _WARNED
    if _REGISTRY is not None:
        return _REGISTRY
    try:
        if "if_verifiable" not in sys.modules:
            spec = importlib.util.find_spec("if_verifiable")
            if spec is None or spec.submodule_search_locations is None:
                raise ModuleNotFoundError("No module named 'if_verifiable'", name="if_verifiable")
            stub = types.ModuleType("if_verifiable")
            stub.__path__ = list(spec.submodule_search_locations)
            stub.__spec__ = spec  # find_spec("if_verifiable") must keep answering
            sys.modules["if_verifiable"] = stub
        import langdetect
        from if_verifiable.ifeval import instructions_registry
    except ImportError as exc:
        if sys.modules.get("if_verifiable") is not None and not hasattr(
                sys.modules["if_verifiable"], "ifeval"):
            sys.modules.pop("if_verifiable", None)
        if not _WARNED:
            _WARNED = True
            logger.warning("Requirement routing is on, but the IFEval registry is not "
                           "installed (%s): requirements its verifiers could decide exactly go "
                           "to the model instead (our own rule:* checks still route). Install "
                           "it with: %s (or pass route=False / --no-route to silence this)",
                           exc, INSTALL)
        return None
    langdetect.DetectorFactory.seed = 0
    _REGISTRY = dict(instructions_registry.INSTRUCTION_DICT)
    return _REGISTRY


def _has_punkt() -> bool:
    import nltk
    try:
        nltk.data.find("tokenizers/punkt")
    except LookupError:
        return False
    return True


def routable(mapping: Mapping | None) -> bool:
    """Whether ``mapping`` can be run here: the registry is installed, has the verifier, and
    the verifier needs no NLTK data that is missing."""
    if mapping is None:
        return False
    if mapping.is_rule:
        return mapping.verifier not in NEEDS_REGISTRY or registry() is not None
    reg = registry()
    if reg is None or mapping.verifier not in reg:
        return False
    return mapping.verifier not in NEEDS_PUNKT or _has_punkt()


def route(text: str, prompt: str | None = None) -> Mapping | None:
    """``map_requirement(text)`` when it can also be run here, else ``None``.

    ``prompt`` is the user's last message: "repeat the request word for word" is decided
    against it (the request is that message less the requirement's own text, as IFEval
    defines it), so without it that requirement is not routed.
    """
    mapping = map_requirement(text)
    if mapping is not None and mapping.verifier == REPEAT:
        if not isinstance(prompt, str):
            return None
        request = prompt.replace(text.strip(), "").strip() if text.strip() else prompt.strip()
        if not request:
            return None
        mapping = Mapping(REPEAT, {"prompt_to_repeat": request})
    return mapping if routable(mapping) else None


def verify(mapping: Mapping, answer: str) -> bool:
    """The verdict on ``answer``: the registry verifier's own ``check_following``, or for a
    ``rule:*`` mapping our exact rule (``OWN_RULES``)."""
    if mapping.is_rule:
        return bool(OWN_RULES[mapping.verifier](answer, **mapping.kwargs))
    reg = registry()
    if reg is None:
        raise ImportError(f"the IFEval registry is not installed; {INSTALL}")
    inst = reg[mapping.verifier](mapping.verifier)
    inst.build_description(**mapping.kwargs)
    return bool(inst.check_following(answer))
