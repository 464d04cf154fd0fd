"""The output rules of an io.yaml: they turn an adapter's raw JSON into the intrinsic's result.

Each rule type is a small frozen object behind one interface (``from_spec`` builds it from its
io.yaml entry, ``apply`` runs it on the output), so running a rule list is one loop with no
branch per type - the way PEFT keeps its LoRA variants. Only ``likelihood`` and ``nest`` are
implemented. Any other type is refused when the io.yaml is loaded: a rule that is skipped at
run time would hand back a silently different result.

``likelihood`` takes its evidence from one of two places:

- the *fast path*: the caller already holds the probability of each category at the position
  where the value starts (one forward pass over a forced JSON prefix, see ``fast_path_spec``);
- the *general path*: the generated JSON text as per-token ``TokenLogprob`` entries with top-k
  alternatives, as an OpenAI-style ``logprobs.content`` list.

Both paths map a token to a category by the same rule (``LikelihoodRule.category_for_token``),
so they agree whenever they see the same probabilities.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from json.decoder import scanstring
from json.scanner import NUMBER_RE
from types import MappingProxyType
from typing import Any, ClassVar, Self

from mellea_local.errors import AdapterSchemaMismatchError, IntrinsicOutputError, IOConfigError

logger = logging.getLogger(__name__)

PathElement = str | int | None
"""One step of an ``input_path``: an object key, a list index, or ``None`` for "every child"."""

JsonPath = tuple[PathElement, ...]
"""An ``input_path`` pattern; ``()`` is the whole output."""

ConcretePath = tuple[str | int, ...]
"""A path to one value inside a parsed output (no wildcards)."""

Category = str | int | bool
"""A key of ``categories_to_values``: the label the adapter emits (``"yes"``, ``true``, ``3``)."""

# Characters that can follow a non-string JSON literal: a token that spells a whole category
# and then one of these still names that category unambiguously.
_AFTER_SCALAR = frozenset(',}] \t\r\n')


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token, its log-probability and the top-k alternatives at its position.

    The shape of an OpenAI ``logprobs.content`` entry. Token texts are the decoded strings of
    single tokens, so joining ``token`` over a generation spells the generated text; that is
    how a ``likelihood`` rule finds the token where a value starts.
    """

    token: str
    logprob: float
    top_logprobs: tuple[tuple[str, float], ...] = ()


# --------------------------------------------------------------------------------------------
# Rules


class TransformationRule(ABC):
    """One step of an io.yaml ``transformations`` list, applied to the parsed adapter output.

    Subclasses set ``type_name`` (the io.yaml ``type``) and ``option_keys`` (the keys the rule
    reads besides ``type`` and ``input_path``), build themselves in ``_from_options`` and
    rewrite one matched value in ``transform``. ``apply`` is shared: it finds every value the
    ``input_path`` matches and replaces it with ``transform``'s result.
    """

    type_name: ClassVar[str]
    option_keys: ClassVar[frozenset[str]]
    input_path: JsonPath

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], *, where: str) -> Self:
        """Build the rule from its io.yaml mapping; ``where`` locates it in error messages."""
        unknown = sorted(set(spec) - {"type", "input_path"} - cls.option_keys)
        if unknown:
            allowed = ", ".join(sorted({"type", "input_path"} | cls.option_keys))
            raise IOConfigError(
                f"{where}: unknown key(s) {unknown} for a {cls.type_name!r} rule. "
                f"Allowed keys: {allowed}; remove or rename the others."
            )
        if "input_path" not in spec:
            raise IOConfigError(
                f"{where}: a {cls.type_name!r} rule needs 'input_path' (a list of keys and "
                "indices, [] for the whole output)."
            )
        return cls._from_options(_parse_input_path(spec["input_path"], where), spec, where)

    @classmethod
    @abstractmethod
    def _from_options(cls, input_path: JsonPath, spec: Mapping[str, Any], where: str) -> Self:
        """Validate the rule's own keys and construct it."""

    @abstractmethod
    def transform(self, value: Any, path: ConcretePath, evidence: _Evidence) -> Any:
        """Return the replacement for ``value``, found at ``path`` of the output."""

    def apply(self, data: Any, evidence: _Evidence) -> Any:
        """Replace every value ``input_path`` matches in ``data`` (mutated and returned).

        A pattern that matches nothing means the output lacks the shape the io.yaml promised:
        that raises ``AdapterSchemaMismatchError`` instead of passing the value through.
        """
        paths = _matching_paths(data, self.input_path)
        if not paths:
            observed, expected = _where_path_breaks(data, self.input_path)
            raise AdapterSchemaMismatchError(evidence.name, observed, expected)
        for path in paths:
            data = _replace(data, path, self.transform(_fetch(data, path), path, evidence))
        return data


@dataclass(frozen=True)
class NestRule(TransformationRule):
    """``nest``: wrap each matched value in an object with one field, ``field_name``.

    requirement-check uses it at ``[]`` to turn ``{"score": p}`` into
    ``{"requirement_check": {"score": p}}``, the contract ``requirement_check_to_bool`` reads.
    """

    type_name: ClassVar[str] = "nest"
    option_keys: ClassVar[frozenset[str]] = frozenset({"field_name"})

    input_path: JsonPath
    field_name: str

    @classmethod
    def _from_options(cls, input_path: JsonPath, spec: Mapping[str, Any], where: str) -> Self:
        field_name = spec.get("field_name")
        if not isinstance(field_name, str) or not field_name:
            raise IOConfigError(
                f"{where}: a 'nest' rule needs 'field_name', a non-empty string (got "
                f"{field_name!r})."
            )
        return cls(input_path=input_path, field_name=field_name)

    def transform(self, value: Any, path: ConcretePath, evidence: _Evidence) -> Any:
        return {self.field_name: value}


@dataclass(frozen=True)
class LikelihoodRule(TransformationRule):
    """``likelihood``: replace a categorical value by its expected value under the model.

    Each category the model could have emitted at the value's first token gets the probability
    of the tokens that start it; the result is ``sum(p_c * value_c) / sum(p_c)``. With
    ``{"yes": 1.0, "no": 0.0}`` that is ``P(yes) / (P(yes) + P(no))``.
    """

    type_name: ClassVar[str] = "likelihood"
    option_keys: ClassVar[frozenset[str]] = frozenset({"categories_to_values"})

    input_path: JsonPath
    categories_to_values: Mapping[Category, float]

    @classmethod
    def _from_options(cls, input_path: JsonPath, spec: Mapping[str, Any], where: str) -> Self:
        raw = spec.get("categories_to_values")
        if not isinstance(raw, Mapping) or not raw:
            raise IOConfigError(
                f"{where}: a 'likelihood' rule needs 'categories_to_values', a non-empty "
                f"mapping from label to number (got {raw!r})."
            )
        table: dict[Category, float] = {}
        for category, value in raw.items():
            if not isinstance(category, str | int):  # bool is an int
                raise IOConfigError(
                    f"{where}: category {category!r} must be a string, integer or boolean."
                )
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise IOConfigError(
                    f"{where}: category {category!r} maps to {value!r}; values must be numbers."
                )
            if not math.isfinite(value):
                raise IOConfigError(f"{where}: category {category!r} maps to a non-finite value.")
            table[category] = float(value)
        return cls(input_path=input_path, categories_to_values=MappingProxyType(table))

    # -- token to category ------------------------------------------------------------------

    def category_for_token(self, token: str, *, in_string: bool = True) -> Category | None:
        """The category a token at the start of the value would begin, or ``None``.

        As in the public result processor, a token maps to the *first* category (io.yaml
        order) it is a prefix of, so ``"ye"`` counts as ``yes`` and ``"n"`` as ``no``. We also
        map a token that spells a whole category and then closes the literal (``yes"`` or
        ``true,``), which the prefix rule alone would drop. ``in_string`` says whether the
        value is a JSON string (the token follows the opening quote): string categories are
        only matched inside strings, the others only outside. Empty tokens match nothing.
        """
        if not token:
            return None
        candidates = [c for c in self.categories_to_values if isinstance(c, str) == in_string]
        for category in candidates:
            if _category_text(category).startswith(token):
                return category
        for category in candidates:
            text = _category_text(category)
            if token.startswith(text) and len(token) > len(text):
                follower = token[len(text)]
                if (in_string and follower == '"') or (not in_string and follower in _AFTER_SCALAR):
                    return category
        return None

    # -- fast path ----------------------------------------------------------------------------

    def score_from_probs(self, probs: Mapping[Category, float]) -> float:
        """Expected value given each category's probability at the value's first token.

        ``probs`` maps categories (``{"yes": p_yes, "no": p_no}``) to unnormalised
        probabilities, e.g. the softmax mass of the tokens that ``category_for_token`` maps to
        each. Returns 0.0 when all the mass is zero, as the public processor does when no
        alternative matches.
        """
        weighted: list[tuple[float, float]] = []
        for category, prob in probs.items():
            if category not in self.categories_to_values:
                raise IntrinsicOutputError(
                    f"Probability given for {category!r}, which is not a category of this "
                    f"likelihood rule; categories: {list(self.categories_to_values)}."
                )
            if isinstance(prob, bool) or not isinstance(prob, int | float):
                raise IntrinsicOutputError(
                    f"Probability of {category!r} is {prob!r}, not a number."
                )
            if not math.isfinite(prob) or prob < 0:
                raise IntrinsicOutputError(
                    f"Probability of {category!r} is {prob!r}; it must be finite and >= 0."
                )
            weighted.append((float(prob), self.categories_to_values[category]))
        return _expected_value(weighted)

    # -- general path -------------------------------------------------------------------------

    def score_from_logprobs(
        self, tokens: Sequence[TokenLogprob], path: ConcretePath | None = None
    ) -> float:
        """Expected value from the top-k logprobs of the token where the value starts.

        ``tokens`` spell the generated JSON; ``path`` locates the value in it (default: this
        rule's ``input_path``, which must then have no wildcards). Follows the public processor
        (``TokenToFloat``): the chosen token counts with its own probability when the emitted
        value is a category, every *other* top-k alternative counts for the category it maps
        to, and the weights are normalised. A value that starts inside a token has no
        alternatives to weigh, so its category value is returned as is.
        """
        if path is None:
            if any(element is None for element in self.input_path):
                raise IntrinsicOutputError(
                    f"The likelihood rule at {_format_path(self.input_path)} has wildcards; "
                    "pass the concrete path of the value to score."
                )
            path = self.input_path  # type: ignore[assignment]
        evidence = _Evidence(name="adapter", value_probs={}, tokens=tokens)
        return self._score_literal(evidence.literal_at(path), tokens)

    def _score_literal(self, literal: _Literal, tokens: Sequence[TokenLogprob]) -> float:
        in_string = isinstance(literal.value, str)
        start = literal.begin + (1 if in_string else 0)  # skip the opening quote
        emitted = self._category_of_literal(literal)
        offsets = _token_offsets(tokens)
        index = offsets.get(start)
        if index is None:
            if emitted is None:
                raise IntrinsicOutputError(
                    f"Value {literal.text} starts inside a token and is not a category "
                    f"({list(self.categories_to_values)}); it cannot be scored."
                )
            return self.categories_to_values[emitted]
        chosen = tokens[index]
        weighted: list[tuple[float, float]] = []
        if emitted is not None:
            weighted.append((math.exp(chosen.logprob), self.categories_to_values[emitted]))
        for alternative, logprob in chosen.top_logprobs:
            if alternative == chosen.token:  # engines often repeat the chosen token
                continue
            category = self.category_for_token(alternative, in_string=in_string)
            if category is not None:
                weighted.append((math.exp(logprob), self.categories_to_values[category]))
        return _expected_value(weighted)

    def _category_of_literal(self, literal: _Literal) -> Category | None:
        in_string = isinstance(literal.value, str)
        for category in self.categories_to_values:
            if in_string and isinstance(category, str) and category == literal.value:
                return category
            if (not in_string and not isinstance(category, str)
                    and _category_text(category) == literal.text):
                return category
        return None

    # -- rule hook ----------------------------------------------------------------------------

    def transform(self, value: Any, path: ConcretePath, evidence: _Evidence) -> Any:
        if isinstance(value, Mapping | list):
            raise AdapterSchemaMismatchError(
                evidence.name, [f"{_format_path(path)}: {type(value).__name__}"],
                [f"{_format_path(path)}: one of {list(self.categories_to_values)}"],
            )
        probs = evidence.value_probs.get(path)
        if probs is not None:
            return self.score_from_probs(probs)
        if evidence.tokens is None:
            raise IntrinsicOutputError(
                f"The likelihood rule at {_format_path(path)} needs evidence: pass value_probs "
                "(category probabilities) or logprobs (per-token top-k logprobs of the output)."
            )
        literal = evidence.literal_at(path)
        if literal.value != value or type(literal.value) is not type(value):
            raise IntrinsicOutputError(
                f"At {_format_path(path)} the token texts spell {literal.text}, but the value "
                f"being scored is {value!r}: the logprobs do not belong to this output (or an "
                "earlier rule already changed it)."
            )
        return self._score_literal(literal, evidence.tokens)


RULE_TYPES: Mapping[str, type[TransformationRule]] = MappingProxyType(
    {rule.type_name: rule for rule in (LikelihoodRule, NestRule)}
)
"""The rule types this package implements, by io.yaml ``type``."""


def parse_transformations(specs: Any, *, where: str) -> tuple[TransformationRule, ...] | None:
    """Parse an io.yaml ``transformations`` value (a list of rule mappings, or null)."""
    if specs is None:
        return None
    if not isinstance(specs, list):
        raise IOConfigError(
            f"{where}: 'transformations' must be a list of rules or null, not "
            f"{type(specs).__name__}."
        )
    return tuple(parse_rule(spec, where=f"{where}: transformations[{i}]")
                 for i, spec in enumerate(specs))


def parse_rule(spec: Any, *, where: str) -> TransformationRule:
    """Build one rule from its io.yaml mapping, refusing rule types we do not implement."""
    if not isinstance(spec, Mapping):
        raise IOConfigError(f"{where}: a rule must be a mapping with a 'type', not {spec!r}.")
    type_name = spec.get("type")
    rule_class = RULE_TYPES.get(type_name) if isinstance(type_name, str) else None
    if rule_class is None:
        supported = ", ".join(RULE_TYPES)
        raise IOConfigError(
            f"{where}: rule type {type_name!r} is not implemented by mellea_local "
            f"(supported: {supported}). Use an adapter whose io.yaml needs only these rules."
        )
    return rule_class.from_spec(spec, where=where)


def apply_transformations(
    rules: Sequence[TransformationRule] | None,
    parsed_json: Any,
    *,
    value_probs: Mapping[ConcretePath | str, Mapping[Category, float]] | None = None,
    logprobs: Sequence[TokenLogprob] | None = None,
    name: str = "adapter",
) -> Any:
    """Run ``rules`` in order over a copy of the adapter's parsed JSON output.

    ``value_probs`` gives category probabilities for the values a ``likelihood`` rule scores,
    keyed by their concrete path (``("score",)``, or ``"score"`` for a top-level field): the
    fast path. ``logprobs`` gives the generated tokens with top-k alternatives: the general
    path. ``name`` names the adapter in schema errors. For requirement-check the result is
    ``{"requirement_check": {"score": p}}``.
    """
    probs_by_path = {
        ((key,) if isinstance(key, str) else tuple(key)): probs
        for key, probs in (value_probs or {}).items()
    }
    evidence = _Evidence(name=name, value_probs=probs_by_path, tokens=logprobs)
    data = copy.deepcopy(parsed_json)
    for rule in rules or ():
        data = rule.apply(data, evidence)
    return data


# --------------------------------------------------------------------------------------------
# Fast path


@dataclass(frozen=True)
class FastPathSpec:
    """What a one-forward-pass scorer needs for an eligible io.yaml.

    Feed the prompt plus ``json_prefix`` (the JSON the adapter would emit up to the value, e.g.
    ``{"score": "``); the next-token distribution then decides the value. Sum the probability
    of the tokens ``likelihood.category_for_token`` maps to each of ``categories`` and call
    ``result_from_probs``.
    """

    field_name: str
    json_prefix: str
    categories: tuple[str, ...]
    likelihood: LikelihoodRule
    rules: tuple[TransformationRule, ...]

    def result_from_probs(self, probs: Mapping[str, float], *, name: str = "adapter") -> Any:
        """The intrinsic result (all rules applied) from the categories' probabilities."""
        # The value greedy decoding would have emitted; the likelihood rule replaces it anyway.
        emitted = max(self.categories, key=lambda c: probs.get(c, 0.0))
        return apply_transformations(
            self.rules, {self.field_name: emitted},
            value_probs={(self.field_name,): probs}, name=name,
        )


def fast_path_spec(
    rules: Sequence[TransformationRule] | None, response_format: Mapping[str, Any] | None
) -> FastPathSpec | None:
    """Return a ``FastPathSpec`` when one forward pass can compute the result, else ``None``.

    Eligible: the rules are a ``likelihood`` over one top-level field followed only by
    ``nest`` rules, and ``response_format`` is an object whose single, required property is
    that field, a string ``enum`` whose every value has a category. Anything else needs
    constrained generation, and the reason is logged at debug level.
    """
    found = _check_fast_path(rules, response_format)
    if isinstance(found, str):
        logger.debug("io.yaml not eligible for the one-forward fast path: %s", found)
        return None
    return found


def _check_fast_path(
    rules: Sequence[TransformationRule] | None, response_format: Mapping[str, Any] | None
) -> FastPathSpec | str:
    if not rules or not isinstance(rules[0], LikelihoodRule):
        return "the first transformation is not a likelihood rule"
    likelihood = rules[0]
    if any(not isinstance(rule, NestRule) for rule in rules[1:]):
        return "rules other than nest follow the likelihood rule"
    if len(likelihood.input_path) != 1 or not isinstance(likelihood.input_path[0], str):
        return "the likelihood rule does not target one top-level field"
    field_name = likelihood.input_path[0]
    if not isinstance(response_format, Mapping) or response_format.get("type") != "object":
        return "response_format is not a JSON object schema"
    properties = response_format.get("properties")
    if not isinstance(properties, Mapping) or list(properties) != [field_name]:
        return f"response_format does not have {field_name!r} as its only property"
    if list(response_format.get("required") or ()) != [field_name]:
        return f"response_format does not require exactly {field_name!r}"
    prop = properties[field_name]
    enum = prop.get("enum") if isinstance(prop, Mapping) else None
    if not isinstance(prop, Mapping) or prop.get("type") != "string" or not enum:
        return f"property {field_name!r} is not a string enum"
    if not all(isinstance(v, str) for v in enum):
        return f"enum of {field_name!r} holds non-string values"
    missing = [v for v in enum if v not in likelihood.categories_to_values]
    if missing:
        return f"enum values {missing} have no category in the likelihood rule"
    return FastPathSpec(
        field_name=field_name,
        # The separator spacing is the one the adapters were trained on (canned outputs show
        # the tokens '{"', 'score', '":', ' "' with logprob 0.0).
        json_prefix="{" + json.dumps(field_name) + ': "',
        categories=tuple(enum),
        likelihood=likelihood,
        rules=tuple(rules),
    )


# --------------------------------------------------------------------------------------------
# Helpers: evidence, JSON literal positions, paths


class _Evidence:
    """What the likelihood rule may score from, plus the adapter name for error messages."""

    def __init__(
        self, *, name: str, value_probs: Mapping[ConcretePath, Mapping[Category, float]],
        tokens: Sequence[TokenLogprob] | None,
    ) -> None:
        self.name = name
        self.value_probs = value_probs
        self.tokens = tokens
        self._literals: dict[ConcretePath, _Literal] | None = None

    def literal_at(self, path: ConcretePath) -> _Literal:
        if self._literals is None:
            text = "".join(t.token for t in self.tokens or ())
            self._literals = _scan_literals(text)
        literal = self._literals.get(path)
        if literal is None:
            raise IntrinsicOutputError(
                f"The token texts do not hold a scalar at {_format_path(path)}; the logprobs do "
                "not belong to this output."
            )
        return literal


@dataclass(frozen=True)
class _Literal:
    """A scalar of the generated JSON with the offset of its first character (a quote for a
    string) and its raw text, so its first token can be found in the logprobs."""

    value: Any
    begin: int
    text: str


def _token_offsets(tokens: Sequence[TokenLogprob]) -> dict[int, int]:
    """Character offset where each token starts -> token index (empty tokens start nothing)."""
    offsets: dict[int, int] = {}
    position = 0
    for index, token in enumerate(tokens):
        if token.token:
            offsets.setdefault(position, index)
        position += len(token.token)
    return offsets


def _scan_literals(text: str) -> dict[ConcretePath, _Literal]:
    """Parse the first JSON value in ``text``, recording every scalar's path and position.

    ``json.loads`` forgets where values were; the likelihood rule needs the offset of the
    value to find the token whose alternatives it weighs. Text after the value (an end-of-text
    marker) is ignored.
    """
    found: dict[ConcretePath, _Literal] = {}
    try:
        _scan_value(text, _skip_space(text, 0), (), found)
    except (ValueError, IndexError) as exc:
        raise IntrinsicOutputError(
            f"The token texts do not spell a JSON value ({exc}): {text[:80]!r}"
        ) from exc
    return found


def _scan_value(s: str, i: int, path: ConcretePath, found: dict[ConcretePath, _Literal]) -> int:
    char = s[i]
    if char == "{":
        i = _skip_space(s, i + 1)
        if s[i] == "}":
            return i + 1
        while True:
            if s[i] != '"':
                raise IntrinsicOutputError(f"expected a key at offset {i}")
            key, i = scanstring(s, i + 1)
            i = _skip_space(s, i)
            if s[i] != ":":
                raise IntrinsicOutputError(f"expected ':' at offset {i}")
            i = _skip_space(s, _scan_value(s, _skip_space(s, i + 1), (*path, key), found))
            if s[i] == "}":
                return i + 1
            if s[i] != ",":
                raise IntrinsicOutputError(f"expected ',' or '}}' at offset {i}")
            i = _skip_space(s, i + 1)
    if char == "[":
        i = _skip_space(s, i + 1)
        if s[i] == "]":
            return i + 1
        index = 0
        while True:
            i = _skip_space(s, _scan_value(s, i, (*path, index), found))
            if s[i] == "]":
                return i + 1
            if s[i] != ",":
                raise IntrinsicOutputError(f"expected ',' or ']' at offset {i}")
            i, index = _skip_space(s, i + 1), index + 1
    if char == '"':
        value, end = scanstring(s, i + 1)
        found[path] = _Literal(value, i, s[i:end])
        return end
    for word, value in (("true", True), ("false", False), ("null", None)):
        if s.startswith(word, i):
            found[path] = _Literal(value, i, word)
            return i + len(word)
    match = NUMBER_RE.match(s, i)
    if match is None:
        raise IntrinsicOutputError(f"unexpected {char!r} at offset {i}")
    integer, fraction, exponent = match.groups()
    number = float(integer + (fraction or "") + (exponent or "")) if fraction or exponent \
        else int(integer)
    found[path] = _Literal(number, i, match.group())
    return match.end()


def _skip_space(s: str, i: int) -> int:
    while i < len(s) and s[i] in " \t\r\n":
        i += 1
    return i


def _category_text(category: Category) -> str:
    """How a category is spelled in JSON output (strings without their quotes)."""
    return category if isinstance(category, str) else json.dumps(category)


def _expected_value(weighted: Sequence[tuple[float, float]]) -> float:
    total = sum(weight for weight, _ in weighted)
    if total <= 0.0:
        return 0.0
    return sum(weight * value for weight, value in weighted) / total


def _parse_input_path(raw: Any, where: str) -> JsonPath:
    if not isinstance(raw, list):
        raise IOConfigError(f"{where}: 'input_path' must be a list, not {raw!r}.")
    for element in raw:
        is_key_or_index = isinstance(element, str | int) and not isinstance(element, bool)
        if element is not None and not is_key_or_index:
            raise IOConfigError(
                f"{where}: 'input_path' element {element!r} must be a key (string), an index "
                "(integer) or null (every child)."
            )
    return tuple(raw)


def _children(data: Any, element: PathElement) -> list[str | int]:
    if isinstance(data, Mapping):
        if element is None:
            return list(data)
        return [element] if isinstance(element, str) and element in data else []
    if isinstance(data, list):
        if element is None:
            return list(range(len(data)))
        ok = isinstance(element, int) and not isinstance(element, bool) and 0 <= element < len(data)
        return [element] if ok else []
    return []


def _matching_paths(data: Any, pattern: JsonPath) -> list[ConcretePath]:
    if not pattern:
        return [()]
    head, rest = pattern[0], pattern[1:]
    return [(child, *tail) for child in _children(data, head)
            for tail in _matching_paths(data[child], rest)]


def _where_path_breaks(data: Any, pattern: JsonPath) -> tuple[list[str], list[str]]:
    """Observed and expected keys at the first step of ``pattern`` that matches nothing."""
    for element in pattern:
        children = _children(data, element)
        if not children:
            if isinstance(data, Mapping):
                observed = [str(key) for key in data]
            elif isinstance(data, list):
                observed = [str(index) for index in range(len(data))]
            else:
                observed = [f"<{type(data).__name__}>"]
            return observed, ["*" if element is None else str(element)]
        data = data[children[0]]
    return [], []  # pragma: no cover - only called when the pattern matched nothing


def _fetch(data: Any, path: ConcretePath) -> Any:
    for element in path:
        data = data[element]
    return data


def _replace(data: Any, path: ConcretePath, value: Any) -> Any:
    if not path:
        return value
    _fetch(data, path[:-1])[path[-1]] = value
    return data


def _format_path(path: Sequence[PathElement]) -> str:
    return "input_path " + json.dumps(list(path))
