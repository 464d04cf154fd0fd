"""The output rules of an io.yaml: they turn an adapter's raw JSON into the intrinsic's result.

Each rule type is a small frozen object behind one interface (``from_spec`` builds it from its
io.yaml entry, ``apply`` runs it on the output), so running a rule list is one loop with no
branch per type - the way PEFT keeps its LoRA variants. Every rule type of the public format is
implemented: ``likelihood``, ``nest``, ``explode``, ``decode_sentences``, ``drop_duplicates``,
``project`` and ``merge_spans``, run in io.yaml order. Any other type is refused when the
io.yaml is loaded: a rule that is skipped at run time would hand back a silently different
result. Model output a rule cannot read (a bad sentence number, a record without the field the
rule needs) raises ``IntrinsicOutputError`` naming the intrinsic and the value; nothing is
dropped silently.

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

from mellea_local.adapters.output_checks import (
    check_output_schema,
    check_result_finite,
    check_token_logprobs,
    with_schema_detail,
)
from mellea_local.adapters.sentences import SENTENCE_SOURCES, MarkedInputs, Sentence
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
            broken = _where_path_breaks(data, self.input_path)
            if broken is None:  # a wildcard over an empty list: nothing to transform
                return data
            raise AdapterSchemaMismatchError(evidence.name, *broken)
        for path in paths:
            data = self.replace_at(data, path, evidence)
        return data

    def replace_at(self, data: Any, path: ConcretePath, evidence: _Evidence) -> Any:
        """Rewrite ``data`` at one matched ``path`` (default: replace the value there)."""
        return _replace(data, path, self.transform(_fetch(data, path), path, evidence))


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


def _where(evidence: _Evidence, rule: TransformationRule, path: ConcretePath) -> str:
    """The start of an output error message: the intrinsic, the rule and where it looked."""
    return f"Intrinsic {evidence.name!r}: the {rule.type_name!r} rule at {_format_path(path)}"


def _records(value: Any, rule: TransformationRule, path: ConcretePath,
             evidence: _Evidence) -> list[dict[str, Any]]:
    """``value`` as a list of JSON objects, or an ``IntrinsicOutputError`` naming the bad one."""
    if not isinstance(value, list):
        raise IntrinsicOutputError(
            f"{_where(evidence, rule, path)} needs a list of records, but the model output "
            f"holds {_show(value)} there."
        )
    for index, record in enumerate(value):
        if not isinstance(record, dict):
            raise IntrinsicOutputError(
                f"{_where(evidence, rule, path)} needs a list of records, but element {index} "
                f"is {_show(record)}."
            )
    return value


def _show(value: Any) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 120 else text[:117] + "..."


def _field_list(raw: Any, key: str, rule: str, where: str, *, allow_empty: bool = False
                ) -> tuple[str, ...]:
    if (not isinstance(raw, list) or (not raw and not allow_empty)
            or not all(isinstance(f, str) and f for f in raw)):
        raise IOConfigError(
            f"{where}: a {rule!r} rule needs {key!r}, a "
            + ("" if allow_empty else "non-empty ") + f"list of field names (got {raw!r})."
        )
    if len(set(raw)) != len(raw):
        raise IOConfigError(f"{where}: {key!r} of a {rule!r} rule names a field twice: {raw!r}.")
    return tuple(raw)


def _field_name(raw: Any, key: str, rule: str, where: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise IOConfigError(
            f"{where}: a {rule!r} rule needs {key!r}, a non-empty string (got {raw!r})."
        )
    return raw


@dataclass(frozen=True)
class ExplodeRule(TransformationRule):
    """``explode``: one record per element of a list-valued field.

    ``[{"r": 0, "c": [3, 5]}]`` with ``target_field: c`` becomes
    ``[{"r": 0, "c": 3}, {"r": 0, "c": 5}]``; a record whose list is empty yields no record
    (a response sentence that cites nothing has no citation).
    """

    type_name: ClassVar[str] = "explode"
    option_keys: ClassVar[frozenset[str]] = frozenset({"target_field"})

    input_path: JsonPath
    target_field: str

    @classmethod
    def _from_options(cls, input_path: JsonPath, spec: Mapping[str, Any], where: str) -> Self:
        return cls(input_path, _field_name(spec.get("target_field"), "target_field",
                                           cls.type_name, where))

    def transform(self, value: Any, path: ConcretePath, evidence: _Evidence) -> Any:
        exploded = []
        for index, record in enumerate(_records(value, self, path, evidence)):
            items = record.get(self.target_field)
            if not isinstance(items, list):
                raise IntrinsicOutputError(
                    f"{_where(evidence, self, path)}: record {index} "
                    + (f"lacks the field {self.target_field!r}" if self.target_field not in
                       record else f"has {self.target_field!r} = {_show(items)}, not a list")
                    + f" ({_show(record)})."
                )
            for item in items:
                exploded.append({k: (item if k == self.target_field else v)
                                 for k, v in record.items()})
        return exploded


@dataclass(frozen=True)
class DropDuplicatesRule(TransformationRule):
    """``drop_duplicates``: one record per value of ``target_fields``.

    The last record of each key is kept, in the place where the key first appeared (the
    public processor's order).
    """

    type_name: ClassVar[str] = "drop_duplicates"
    option_keys: ClassVar[frozenset[str]] = frozenset({"target_fields"})

    input_path: JsonPath
    target_fields: tuple[str, ...]

    @classmethod
    def _from_options(cls, input_path: JsonPath, spec: Mapping[str, Any], where: str) -> Self:
        return cls(input_path, _field_list(spec.get("target_fields"), "target_fields",
                                           cls.type_name, where))

    def transform(self, value: Any, path: ConcretePath, evidence: _Evidence) -> Any:
        kept: dict[str, dict[str, Any]] = {}
        for index, record in enumerate(_records(value, self, path, evidence)):
            missing = [f for f in self.target_fields if f not in record]
            if missing:
                raise IntrinsicOutputError(
                    f"{_where(evidence, self, path)}: record {index} lacks {missing} "
                    f"({_show(record)})."
                )
            # JSON text as the key: values may be lists or objects, which do not hash.
            key = json.dumps([record[f] for f in self.target_fields], sort_keys=True)
            kept[key] = record
        return list(kept.values())


@dataclass(frozen=True)
class ProjectRule(TransformationRule):
    """``project``: keep only ``retained_fields`` of each record, renamed when a mapping.

    A record (or a list of them) missing a retained field is malformed output: the error names
    the field instead of filling in null.
    """

    type_name: ClassVar[str] = "project"
    option_keys: ClassVar[frozenset[str]] = frozenset({"retained_fields"})

    input_path: JsonPath
    retained_fields: Mapping[str, str]

    @classmethod
    def _from_options(cls, input_path: JsonPath, spec: Mapping[str, Any], where: str) -> Self:
        raw = spec.get("retained_fields")
        if isinstance(raw, Mapping):
            if not raw or not all(isinstance(k, str) and k and isinstance(v, str) and v
                                  for k, v in raw.items()):
                raise IOConfigError(
                    f"{where}: 'retained_fields' of a 'project' rule must map field names to "
                    f"new names (non-empty strings), got {raw!r}."
                )
            if len(set(raw.values())) != len(raw):
                raise IOConfigError(
                    f"{where}: 'retained_fields' renames two fields to the same name: {raw!r}."
                )
            table = dict(raw)
        else:
            table = {f: f for f in _field_list(raw, "retained_fields", cls.type_name, where)}
        return cls(input_path, MappingProxyType(table))

    def _one(self, record: dict[str, Any], label: str, path: ConcretePath,
             evidence: _Evidence) -> dict[str, Any]:
        missing = [f for f in self.retained_fields if f not in record]
        if missing:
            raise IntrinsicOutputError(
                f"{_where(evidence, self, path)}: {label} lacks {missing} ({_show(record)})."
            )
        return {new: record[old] for old, new in self.retained_fields.items()}

    def transform(self, value: Any, path: ConcretePath, evidence: _Evidence) -> Any:
        if isinstance(value, dict):
            return self._one(value, "the record", path, evidence)
        records = _records(value, self, path, evidence)
        return [self._one(r, f"record {i}", path, evidence) for i, r in enumerate(records)]


_DECODE_OUTPUTS = ("begin", "end", "text", "document_id", "message_index")


@dataclass(frozen=True)
class DecodeSentencesRule(TransformationRule):
    """``decode_sentences``: a sentence number becomes the sentence's offsets and text.

    The number at ``input_path`` indexes the sentences of ``source`` (``last_message``,
    ``documents``, ``all_but_last_message``, or a list of them numbered on across), as they
    were marked in the request; the fields named in ``output_names`` (``begin``, ``end``,
    ``text``, and ``document_id`` / ``message_index`` where the source has them) are added to
    the record holding the number. Offsets point into the unmarked text. A number that is not
    an integer or names no sentence raises ``IntrinsicOutputError`` naming it.
    """

    type_name: ClassVar[str] = "decode_sentences"
    option_keys: ClassVar[frozenset[str]] = frozenset({"source", "output_names"})

    input_path: JsonPath
    source: tuple[str, ...]
    output_names: Mapping[str, str]

    @classmethod
    def _from_options(cls, input_path: JsonPath, spec: Mapping[str, Any], where: str) -> Self:
        if not input_path:
            raise IOConfigError(
                f"{where}: a 'decode_sentences' rule adds fields next to the number it decodes, "
                "so its input_path must name a field (e.g. [null, 'r']), not []."
            )
        raw = spec.get("source")
        sources = [raw] if isinstance(raw, str) else raw
        if (not isinstance(sources, list) or not sources
                or any(s not in SENTENCE_SOURCES for s in sources)
                or len(set(sources)) != len(sources)):
            raise IOConfigError(
                f"{where}: 'source' of a 'decode_sentences' rule must be one of "
                f"{list(SENTENCE_SOURCES)} or a list of distinct ones, not {raw!r}."
            )
        names = spec.get("output_names")
        if not isinstance(names, Mapping) or not names:
            raise IOConfigError(
                f"{where}: a 'decode_sentences' rule needs 'output_names', a mapping from "
                f"{list(_DECODE_OUTPUTS)} to the field names to add (got {names!r})."
            )
        for key, field_name in names.items():
            allowed = key in ("begin", "end", "text") or (
                key == "document_id" and "documents" in sources) or (
                key == "message_index" and "all_but_last_message" in sources)
            if not allowed:
                raise IOConfigError(
                    f"{where}: output_names key {key!r} is not one this rule can fill for "
                    f"source {sources}; use begin, end, text (document_id with documents, "
                    "message_index with all_but_last_message)."
                )
            if not isinstance(field_name, str) or not field_name:
                raise IOConfigError(
                    f"{where}: output_names.{key} must be a non-empty field name, not "
                    f"{field_name!r}."
                )
        return cls(input_path, tuple(sources), MappingProxyType(dict(names)))

    def transform(self, value: Any, path: ConcretePath, evidence: _Evidence) -> Any:
        return value  # unused: ``replace_at`` rewrites the parent record instead

    def replace_at(self, data: Any, path: ConcretePath, evidence: _Evidence) -> Any:
        where = _where(evidence, self, path)
        parent = _fetch(data, path[:-1])
        if not isinstance(parent, dict):
            raise IntrinsicOutputError(
                f"{where}: the sentence number must sit in a record, but its parent is "
                f"{_show(parent)}."
            )
        number = parent[path[-1]]
        table = evidence.sentence_table(self.source, where)
        if isinstance(number, bool) or not isinstance(number, int):
            raise IntrinsicOutputError(
                f"{where}: expected a sentence number, but the model output holds "
                f"{_show(number)}."
            )
        if not 0 <= number < len(table):
            raise IntrinsicOutputError(
                f"{where}: sentence number {number} is out of range; the marked "
                f"{' + '.join(self.source)} hold "
                + (f"sentences 0..{len(table) - 1}." if table else "no sentences.")
            )
        sentence = table[number]
        values = {"begin": sentence.begin, "end": sentence.end, "text": sentence.text,
                  "document_id": sentence.document_id, "message_index": sentence.message_index}
        added = {name: values[key] for key, name in self.output_names.items()}
        return _replace(data, path[:-1], {**parent, **added})


@dataclass(frozen=True)
class MergeSpansRule(TransformationRule):
    """``merge_spans``: adjacent spans of the same group become one span.

    Records are sorted by ``group_fields`` then ``begin_field``; a record whose begin equals
    the previous record's end (same group) extends it, concatenating ``text_field`` when set.
    Records may hold only the group and span fields. Two spans starting at the same offset of
    one group, or a span without offsets, are malformed: ``IntrinsicOutputError``.
    """

    type_name: ClassVar[str] = "merge_spans"
    option_keys: ClassVar[frozenset[str]] = frozenset(
        {"group_fields", "begin_field", "end_field", "text_field"})

    input_path: JsonPath
    group_fields: tuple[str, ...]
    begin_field: str
    end_field: str
    text_field: str | None = None

    @classmethod
    def _from_options(cls, input_path: JsonPath, spec: Mapping[str, Any], where: str) -> Self:
        group = _field_list(spec.get("group_fields", []), "group_fields", cls.type_name, where,
                            allow_empty=True)
        begin = _field_name(spec.get("begin_field"), "begin_field", cls.type_name, where)
        end = _field_name(spec.get("end_field"), "end_field", cls.type_name, where)
        text = spec.get("text_field")
        if text is not None:
            text = _field_name(text, "text_field", cls.type_name, where)
        fields = [*group, begin, end, *([text] if text else [])]
        if len(set(fields)) != len(fields):
            raise IOConfigError(f"{where}: a 'merge_spans' rule names one field twice: {fields}.")
        return cls(input_path, group, begin, end, text)

    def transform(self, value: Any, path: ConcretePath, evidence: _Evidence) -> Any:
        records = _records(value, self, path, evidence)
        expected = {*self.group_fields, self.begin_field, self.end_field}
        if self.text_field:
            expected.add(self.text_field)
        keyed = []
        for index, record in enumerate(records):
            extra = sorted(set(record) - expected)
            if extra:
                raise IntrinsicOutputError(
                    f"{_where(evidence, self, path)}: record {index} has fields {extra} "
                    f"besides the group and span fields ({_show(record)}); project them away "
                    "first."
                )
            for name in (self.begin_field, self.end_field, self.text_field):
                if name is None:
                    continue
                good = (isinstance(record.get(name), str) if name == self.text_field else
                        isinstance(record.get(name), int) and not isinstance(record[name], bool))
                if not good:
                    raise IntrinsicOutputError(
                        f"{_where(evidence, self, path)}: record {index} has {name!r} = "
                        f"{_show(record.get(name))} ({_show(record)})."
                    )
            group = json.dumps([record.get(f) for f in self.group_fields], sort_keys=True)
            keyed.append(((group, record[self.begin_field]), record))
        keyed.sort(key=lambda item: item[0])
        merged: list[dict[str, Any]] = []
        previous_key = None
        for key, record in keyed:
            if key == previous_key:
                raise IntrinsicOutputError(
                    f"{_where(evidence, self, path)}: two spans start at offset {key[1]} of one "
                    f"group ({_show(record)}); merge_spans needs non-overlapping spans."
                )
            last = merged[-1] if merged else None
            if (last is not None and key[0] == previous_key[0]
                    and last[self.end_field] == record[self.begin_field]):
                last[self.end_field] = record[self.end_field]
                if self.text_field:
                    last[self.text_field] += record[self.text_field]
            else:
                merged.append(dict(record))
            previous_key = key
        return merged


RULE_TYPES: Mapping[str, type[TransformationRule]] = MappingProxyType(
    {rule.type_name: rule for rule in (
        DecodeSentencesRule, DropDuplicatesRule, ExplodeRule, LikelihoodRule, MergeSpansRule,
        NestRule, ProjectRule)}
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


_CHANNEL, _MESSAGE = "<|channel|>", "<|message|>"
_CHANNEL_ENDS = frozenset({"<|end|>", "<|return|>", "<|end_of_text|>"})


def final_channel(tokens: Sequence[TokenLogprob]) -> Sequence[TokenLogprob]:
    """The tokens of the last ``<|channel|>final<|message|>`` section (io.yaml
    ``logprobs_workaround``), up to its end token; all of ``tokens`` when there is none.

    Harmony-format models (gpt-oss) wrap their answer in channels; the JSON the rules read is
    the final channel's payload. Headers are matched on whole tokens, so text that merely
    spells ``<|channel|>`` is never taken for the control token.
    """
    start = None
    for i, token in enumerate(tokens):
        if token.token != _CHANNEL:
            continue
        j = i + 1
        while j < len(tokens) and not tokens[j].token.strip():
            j += 1
        if j < len(tokens) and tokens[j].token.strip() == "final":
            j += 1
            while j < len(tokens) and not tokens[j].token.strip():
                j += 1
            if j < len(tokens) and tokens[j].token == _MESSAGE:
                start = j + 1
    if start is None or start >= len(tokens):
        return tokens
    end = next((k for k in range(start, len(tokens)) if tokens[k].token in _CHANNEL_ENDS),
               len(tokens))
    return list(tokens[start:end]) or tokens


def apply_transformations(
    rules: Sequence[TransformationRule] | None,
    parsed_json: Any,
    *,
    value_probs: Mapping[ConcretePath | str, Mapping[Category, float]] | None = None,
    logprobs: Sequence[TokenLogprob] | None = None,
    name: str = "adapter",
    sentences: MarkedInputs | None = None,
    schema: Mapping[str, Any] | None = None,
    logprobs_normalised: bool = False,
) -> Any:
    """Run ``rules`` in order over a copy of the adapter's parsed JSON output.

    ``value_probs`` gives category probabilities for the values a ``likelihood`` rule scores,
    keyed by their concrete path (``("score",)``, or ``"score"`` for a top-level field): the
    fast path. ``logprobs`` gives the generated tokens with top-k alternatives: the general
    path. ``sentences`` holds the marked request texts ``decode_sentences`` reads. ``name``
    names the intrinsic in errors. For requirement-check the result is
    ``{"requirement_check": {"score": p}}``.

    The logprobs are checked against the rules of probability before the rules run
    (``output_checks``; the top-k sum and distinct alternatives only when
    ``logprobs_normalised``, i.e. an engine's raw logprobs: a temperature divides them, and
    our own decodes can collide); after them, the output against ``schema`` (the io.yaml's
    ``response_format``; ``IntrinsicSchemaError``), and the result must hold only finite
    numbers.
    """
    if logprobs is not None:
        check_token_logprobs(logprobs, name, normalised=logprobs_normalised,
                             distinct=logprobs_normalised)
    probs_by_path = {
        ((key,) if isinstance(key, str) else tuple(key)): probs
        for key, probs in (value_probs or {}).items()
    }
    evidence = _Evidence(name=name, value_probs=probs_by_path, tokens=logprobs,
                         sentences=sentences)
    data = copy.deepcopy(parsed_json)
    try:
        for rule in rules or ():
            data = rule.apply(data, evidence)
    except AdapterSchemaMismatchError as exc:
        detailed = with_schema_detail(exc, parsed_json, schema)  # the value and the fix
        if detailed is exc:
            raise
        raise detailed from exc
    # After the rules, whose own errors name the value a rule could not read more precisely;
    # the schema catches the rest (a value outside an enum that a likelihood still scored).
    check_output_schema(parsed_json, schema, name)
    check_result_finite(data, name)
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
    ``nest`` and ``project`` rules (they only rename and wrap the score), and
    ``response_format`` is an object whose single, required property is that field, a string
    ``enum`` whose every value has a category. Anything else needs
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
    if any(not isinstance(rule, NestRule | ProjectRule) for rule in rules[1:]):
        return "rules other than nest and project follow the likelihood rule"
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
        tokens: Sequence[TokenLogprob] | None, sentences: MarkedInputs | None = None,
    ) -> None:
        self.name = name
        self.value_probs = value_probs
        self.tokens = tokens
        self.sentences = sentences
        self._literals: dict[ConcretePath, _Literal] | None = None
        self._tables: dict[tuple[str, ...], list[Sentence]] = {}

    def sentence_table(self, sources: tuple[str, ...], where: str) -> list[Sentence]:
        """The sentences of ``sources`` as the request marked them (decoded once per output)."""
        if sources not in self._tables:
            if self.sentences is None:
                raise IntrinsicOutputError(
                    f"{where}: decoding sentence numbers needs the marked request; pass "
                    "sentences=MarkedInputs(...) (the intrinsic call does this itself)."
                )
            self._tables[sources] = self.sentences.sentences(sources, where=where)
        return self._tables[sources]

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


def _where_path_breaks(data: Any, pattern: JsonPath) -> tuple[list[str], list[str]] | None:
    """Observed and expected keys at the first step of ``pattern`` that matches nothing;
    ``None`` when a wildcard met an empty list or object (a legitimately empty output)."""
    for element in pattern:
        children = _children(data, element)
        if not children and element is None and isinstance(data, Mapping | list) and not data:
            return None
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
