"""Route what a program can verify: a requirement's text mapped to one IFEval verifier.

A 135 M model should not guess whether a text has at most 12 words. ``map_requirement`` maps a
requirement's WHOLE text to one verifier of Google's IFEval instruction registry (its
``INSTRUCTION_DICT`` ids, e.g. ``length_constraints:number_words``) and that verifier's kwargs,
but only when one of a small set of anchored patterns matches the entire text ("Keep it under
50 words.", "No commas, please.", "Reply in JSON."). Anything else, including every text that
merely mentions a verifiable property among others ("The output is a JSON object with the keys
...", "two or three sentences at most"), maps to ``None`` and the aLoRA decides.

``verify`` runs the registry's own ``check_following`` on the answer text: the routed verdict is
exactly the registry's, never a re-implementation. The registry comes from the optional
``[verify]`` extra (``if-verifiable``, whose ``ifeval`` module needs ``immutabledict``,
``langdetect`` and ``nltk``); without it routing is off and says so once (a logged warning).
Types whose verifier needs NLTK's ``punkt`` model (``number_sentences``,
``capital_word_frequency``) are routed only when ``punkt`` is already installed; nothing is ever
downloaded. ``langdetect`` is seeded (``DetectorFactory.seed = 0``) so a verdict repeats.

"Starts with X" has no verifier in the registry (it lacks IFEval's constrained start), so it is
not routed.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

NEEDS_PUNKT = frozenset({"length_constraints:number_sentences",
                         "change_case:capital_word_frequency"})
"""Verifiers that call NLTK's punkt model: refused unless punkt is already installed."""


@dataclass(frozen=True)
class Mapping:
    """One registry verifier and the kwargs its ``build_description`` takes."""

    verifier: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.verifier}({args})"


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
_SUBJ = r"(?:the|your|my) (?:whole |entire |full )?(?:response|answer|reply|text|output)"
_MODAL = r"(?:must|should|has to|needs to|will|is to)"
LEAD = (rf"(?:(?:please )?(?:{_SUBJ} (?:{_MODAL} )?(?:be |is |are |have |has |need |needs )?"
        rf"(?:written |given |formatted )?|it (?:{_MODAL} )?(?:be |is )?|keep it |keep "
        rf"(?:it|{_SUBJ}) "
        rf"|be brief: |make it |write (?:it |the (?:response|answer|reply) )?|answer |respond "
        rf"|reply |use |stay |i want |i need |give |format it |format (?:{_SUBJ}) )?)")
_Q = r"""(?:'[^'\n]{1,60}'|"[^"\n]{1,60}"|“[^”\n]{1,60}”)"""
_KWLIST = rf"(?P<kws>{_Q}(?:(?:, | and |, and ){_Q}){{0,5}})"
_ANYLIST = rf"(?P<kws>{_Q}(?:(?:, | and |, and | or |, or ){_Q}){{0,5}})"  # forbidden: and/or
_LANGS = {"french": "fr", "german": "de", "spanish": "es", "italian": "it",
          "portuguese": "pt", "dutch": "nl", "russian": "ru", "chinese": "zh-cn",
          "japanese": "ja", "korean": "ko", "arabic": "ar", "hindi": "hi", "swedish": "sv",
          "polish": "pl", "turkish": "tr"}


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


_WORDS = r"words?(?: long| in (?:total|length)| in the (?:reply|response|answer))?"


@_rule("length_constraints:number_words",
       rf"(?:in )?(?:under|below|fewer than|less than|shorter than) {_NUM} {_WORDS}")
def _words_under(m):
    return {"relation": "less than", "num_words": _number(m["n"])}


@_rule("length_constraints:number_words",
       rf"(?:in )?(?:at most|no more than|not more than|a maximum of|up to) {_NUM} {_WORDS}",
       rf"{_NUM} words or (?:fewer|less)")
def _words_at_most(m):  # "at most N" is "fewer than N + 1"
    return {"relation": "less than", "num_words": _number(m["n"]) + 1}


@_rule("length_constraints:number_words",
       rf"(?:in )?(?:at least|no fewer than|no less than|a minimum of) {_NUM} {_WORDS}",
       rf"{_NUM} (?:or more words|words or more)(?: in the (?:reply|response|answer))?")
def _words_at_least(m):
    return {"relation": "at least", "num_words": _number(m["n"])}


@_rule("length_constraints:number_sentences",
       rf"(?:in )?(?:under|below|fewer than|less than) {_NUM} sentences")
def _sentences_under(m):
    return {"relation": "less than", "num_sentences": _number(m["n"])}


@_rule("length_constraints:number_sentences",
       rf"(?:in )?(?:at least|no fewer than|a minimum of) {_NUM} sentences",
       rf"{_NUM} (?:or more sentences|sentences or more)")
def _sentences_at_least(m):
    return {"relation": "at least", "num_sentences": _number(m["n"])}


_CAPS = (r"(?:all caps|all capitals|all capital letters|all upper ?case(?: letters)?"
         r"|capital letters only|upper ?case letters only|only upper ?case letters|in capital "
         r"letters"
         r"|capital letters|entirely (?:in )?upper ?case|(?:in )?english and in all capital "
         r"letters)")


@_rule("change_case:english_capital",
       rf"(?:in |using |written in )?{_CAPS}(?:, in english)?",
       r"every letter (?:has to|must|should) be (?:upper ?case|a capital(?: letter)?|capitalized)")
def _caps(m):
    return {}


_LOWER = (r"(?:all lower ?case(?: letters)?|lower ?case(?: letters)? only|only lower ?case letters"
          r"|entirely (?:in )?lower ?case|(?:all )?in lower ?case(?: letters)?)")


@_rule("change_case:english_lowercase",
       rf"(?:in |using |written )?{_LOWER}(?:, in english)?",
       r"(?:no|not use any|use no|uses no|contain no|contains no) capital letters(?: at all)?",
       r"(?:don't|do not|never) capitali[sz]e anything",
       r"every (?:character|letter) (?:has to|must|should) be lower ?case")
def _lower(m):
    return {}


@_rule("punctuation:no_comma",
       r"(?:no|not use any|use no|uses no|contain no|contains no|without(?: any)?) commas(?: at "
       r"all)?",
       r"(?:don't|do not|never) use (?:any )?commas(?: at all)?",
       r"avoid(?: using)? commas(?: completely| entirely)?",
       r"refrain from using (?:a single comma|any commas)",
       r"comma-free")
def _no_comma(m):
    return {}


@_rule("startend:end_checker",
       r"(?:end|finish|close|conclude)(?: (?:it|your (?:response|answer|reply)))? with the "
       r"(?:exact )?phrase:? (?P<p>.{2,80}?)(?: and nothing (?:after|else)(?: it)?[.!]?)?",
       rf"(?:end|finish|close|conclude)(?: (?:it|your (?:response|answer|reply)))? with "
       rf"(?P<p>{_Q})(?:[.!]| and nothing (?:after|else)(?: it)?[.!]?)?",
       r"(?:ends?|finish(?:es)?) with the (?:exact )?phrase:? (?P<p>.{2,80}?)",
       r"the (?:final|last) words (?:must|should) be:? (?P<p>.{2,80}?)")
def _end(m):
    phrase = m["p"].strip()
    if phrase[:1] in "'\"“" and len(_quoted(phrase)) == 1:
        phrase = _quoted(phrase)[0]
    return {"end_phrase": phrase} if phrase.strip(" '\"“”") == phrase else None


_DQ = r"(?:\"?double quot(?:es|ation marks)\"?|\"double quotes\")"


@_rule("startend:quotation",
       rf"(?:wrap|enclose|put) (?:the|your) (?:entire|whole|full) (?:response|answer|reply) "
       rf"(?:in|inside|within) {_DQ}",
       rf"(?:wrapped|enclosed) (?:entirely )?in {_DQ}")
def _quotes(m):
    return {}


@_rule("detectable_format:json_format",
       r"(?:in |as )?(?:valid |parseable )?json(?: only)?(?: and nothing else)?",
       r"entirely in json", r"json format(?:ted)?",
       r"(?:in |as )?(?:a |one )?(?:valid |parseable )?json (?:document|format)",
       r"return everything as (?:valid |parseable )?json",
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


@_rule("keywords:existence",
       rf"(?:include|mention|contain|use|mentions|includes|contains)(?: the (?:key)?words?)? "
       rf"{_KWLIST}"
       r"(?: somewhere| in (?:the|your) (?:response|answer|reply|text)| in what you write)?",
       r"include the keywords? (?P<plain>[a-z][\w\-]*(?:(?:, | and |, and )[a-z][\w\-]*){0,5})")
def _keywords(m):
    g = m.groupdict()
    words = _quoted(g["kws"]) if g.get("kws") else re.split(r", and |, | and ", g["plain"])
    return {"keywords": words} if _plain(words) else None


@_rule("keywords:forbidden_words",
       rf"(?:(?:does|do|must|should) not|doesn't|don't|never) "
       r"(?:use|include|say|write|mention|contain)"
       rf"(?: the (?:key)?words?)? {_ANYLIST}",
       rf"avoid (?:saying|using)(?: the words?)? {_ANYLIST}",
       rf"{_ANYLIST} (?:must|should) not (?:show up|appear)(?: at all| anywhere)?",
       rf"keep {_ANYLIST} out of the (?:text|response|answer|reply)(?: entirely)?",
       rf"leave out {_ANYLIST}")
def _forbidden(m):
    words = _quoted(m["kws"])
    return {"forbidden_words": words} if _plain(words) else None


@_rule("keywords:frequency",
       rf"(?:use|say|mention|include) (?:the word )?(?P<w>{_Q}) (?:at least|no fewer than) "
       rf"{_NUM} times",
       rf"(?:use|say|mention|include) (?:the word )?(?P<w>{_Q}) (?:fewer|less) than {_NUM} times")
def _frequency(m):
    [word] = _quoted(m["w"])
    rel = "at least" if re.search(r"at least|no fewer", m[0], re.I) else "less than"
    return {"keyword": word, "frequency": _number(m["n"]), "relation": rel} if _plain([word]) \
        else None


@_rule("detectable_format:title",
       r"(?:with |include |add |start with |give it )?a (?:title|heading) (?:wrapped |enclosed )?"
       r"(?:in|inside|within) (?:<<)?double ang(?:ular|le) brackets(?:>>)?(?:, (?:like|such as) "
       r"<<title>>)?",
       r"(?:with |include |add |start with |give it )?a (?:title|heading) (?:wrapped |enclosed )?"
       r"(?:in|inside|within) << and >>")
def _title(m):
    return {}


@_rule("detectable_content:postscript",
       r"(?:add|include|end with|finish with) a postscript (?:starting|beginning) with "
       r"(?P<m>p\.\s?(?:p\.\s?)?s\.?)(?: at the end)?",
       r"(?:end|finish)(?: off)? with a (?P<m>p\.\s?(?:p\.\s?)?s\.?) (?:line|note)(?: after the "
       r"main text"
       r"| at the end)?")
def _postscript(m):
    return {"postscript_marker": m["m"]}


@_rule("detectable_content:number_placeholders",
       rf"(?:put in |include |leave |use )?(?:at least|no fewer than) {_NUM} "
       r"(?:placeholders|bracketed fields) "
       r"(?:in square brackets|such as \[\w+\]|like \[\w+\])(?:,? (?:such as|like) \[\w+\])?")
def _placeholders(m):
    return {"num_placeholders": _number(m["n"])}


@_rule("language:response_language",
       rf"(?:in |using |written in )(?P<lang>{'|'.join(_LANGS)})(?: only)?(?:, no other language)?")
def _language(m):
    return {"language": _LANGS[m["lang"].lower()]}


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


_COMPILED = [(v, re.compile(p, re.IGNORECASE), b) for v, p, b in RULES]


def _normal(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r",? please[.!]?$", "", text, flags=re.IGNORECASE)
    return re.sub(r"[.!]+$", "", text).strip()


def map_requirement(text: str) -> Mapping | None:
    """The registry verifier that decides ``text``, or ``None`` when no mapping is confident.

    Confident means exactly one verifier's anchored patterns match the whole text (with the
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
            logger.warning("Requirement routing asked for, but the IFEval registry is not "
                           "installed (%s); every requirement goes to the model. Install it with: "
                           "%s", exc, INSTALL)
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
    reg = registry()
    if reg is None or mapping.verifier not in reg:
        return False
    return mapping.verifier not in NEEDS_PUNKT or _has_punkt()


def route(text: str) -> Mapping | None:
    """``map_requirement(text)`` when it can also be run here, else ``None``."""
    mapping = map_requirement(text)
    return mapping if routable(mapping) else None


def verify(mapping: Mapping, answer: str) -> bool:
    """The registry verifier's own verdict on ``answer`` (``check_following``)."""
    reg = registry()
    if reg is None:
        raise ImportError(f"the IFEval registry is not installed; {INSTALL}")
    inst = reg[mapping.verifier](mapping.verifier)
    inst.build_description(**mapping.kwargs)
    return bool(inst.check_following(answer))
