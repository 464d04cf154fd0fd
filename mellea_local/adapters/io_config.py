"""An adapter's io.yaml, parsed into one typed, documented, frozen config.

io.yaml is the public format of IBM's intrinsics libraries (granite-common's
``IntrinsicsRewriter`` / ``IntrinsicsResultProcessor``): it says which user message to append
before calling the adapter (``instruction``), how to constrain its output
(``response_format``), which generation parameters it was trained with, and how to turn its raw
JSON into the intrinsic's result (``transformations``). Unknown keys and unimplemented rules
are refused at load time, naming the file, because a skipped setting changes results silently;
so are schemas and rules that disagree (``_check_meaning``).
"""

from __future__ import annotations

import json
import math
import os
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from mellea_local.adapters.output_checks import check_token_logprobs
from mellea_local.adapters.sentences import SENTENCE_SOURCES, MarkedInputs
from mellea_local.adapters.transformations import (
    Category,
    ConcretePath,
    DecodeSentencesRule,
    FastPathSpec,
    LikelihoodRule,
    TokenLogprob,
    TransformationRule,
    apply_transformations,
    fast_path_spec,
    final_channel,
    parse_transformations,
)
from mellea_local.errors import IntrinsicOutputError, IOConfigError
from mellea_local.inputs import json_depth

# The public format requires these keys (null is a valid value). ``model`` is required there
# too, but the published overlays omit it and it means nothing to a local backend, so a
# missing ``model`` reads as null.
_REQUIRED_KEYS = ("response_format", "transformations")
_OPTIONAL_KEYS = (
    "model", "instruction", "parameters", "sentence_boundaries", "docs_as_message",
    "logprobs_workaround", "name",
)
_DOCS_AS_MESSAGE_MODES = ("string", "json", "roles")

APPLIED_PARAMETERS = ("max_completion_tokens", "temperature")
"""The io.yaml ``parameters`` an intrinsic call applies: the general path's token budget and
the temperature probabilities are read at (a call's options override both)."""

MAX_IO_YAML_BYTES = 1 << 20
"""The largest io.yaml read (1 MiB); the published files are about 2 KB."""
MAX_IO_YAML_DEPTH = 32
"""The deepest nesting of mappings and lists accepted, in the YAML and in response_format."""


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses aliases and duplicate keys and bounds nesting depth.

    Checked while the node tree is composed, before anything is expanded, so an alias bomb
    is refused in microseconds instead of being built.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _YamlRefusal(
                f"uses the YAML alias *{event.anchor} (line {event.start_mark.line + 1}); "
                "aliases are refused because nested ones expand exponentially. Write the "
                "value out in full"
            )
        self._depth += 1
        if self._depth > MAX_IO_YAML_DEPTH:
            mark = self.peek_event().start_mark
            raise _YamlRefusal(
                f"nests deeper than {MAX_IO_YAML_DEPTH} levels (line {mark.line + 1}); an "
                "io.yaml needs a few. Flatten the structure"
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                continue
            if key in seen:
                raise _YamlRefusal(
                    f"sets the key {key!r} twice (line {key_node.start_mark.line + 1}); "
                    "YAML would silently keep the last one. Remove one of them"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _YamlRefusal(Exception):
    """Raised inside the loader; ``load_yaml_text`` turns it into an IOConfigError."""


def load_yaml_text(text: str, source: str) -> Any:
    """Parse io.yaml text as plain data with the bounds of ``_BoundedLoader``."""
    loader = None
    try:
        loader = _BoundedLoader(text)  # the reader refuses control characters here already
        return loader.get_single_data()
    except _YamlRefusal as exc:
        raise IOConfigError(f"{source} {exc}.") from None
    except yaml.YAMLError as exc:
        raise IOConfigError(
            f"{source} is not valid YAML: {exc}. Fix the syntax at the position shown."
        ) from exc
    finally:
        if loader is not None:
            loader.dispose()


def check_depth(value: Any, source: str, what: str = "io.yaml") -> None:
    """Refuse data nested deeper than ``MAX_IO_YAML_DEPTH`` (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping | list | tuple):
            if depth > MAX_IO_YAML_DEPTH:
                raise IOConfigError(
                    f"{source}: the {what} nests deeper than {MAX_IO_YAML_DEPTH} levels; "
                    "flatten it."
                )
            children = item.values() if isinstance(item, Mapping) else item
            stack.extend((child, depth + 1) for child in children)


@dataclass(frozen=True)
class IOConfig:
    """The parsed io.yaml of one adapter. Build it with ``load`` or ``from_dict``."""

    source: str = field(
        default="<dict>",
        metadata={"help": "Where the config was read from; every error message names it."},
    )
    model: str | None = field(
        default=None,
        metadata={"help": "Logical model name the adapter targets; null means the loaded base."},
    )
    response_format: Mapping[str, Any] | None = field(
        default=None,
        metadata={
            "help": "JSON schema the output is constrained to (written as a JSON string in "
            "io.yaml); read-only here, ``response_format_dict()`` gives a mutable copy."
        },
    )
    transformations: tuple[TransformationRule, ...] | None = field(
        default=None,
        metadata={"help": "Rules turning the raw JSON into the result, in order; null: none."},
    )
    instruction: str | None = field(
        default=None,
        metadata={
            "help": "str.format template of the user message appended before the adapter "
            "runs, e.g. '<requirements>: {requirement}\\n...'; '{{' and '}}' are literal braces."
        },
    )
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({}),
        metadata={
            "help": "Generation parameters the adapter was trained with (max_completion_tokens, "
            "temperature, ...); caller options override them."
        },
    )
    sentence_boundaries: Mapping[str, str] | None = field(
        default=None,
        metadata={
            "help": "Where to insert sentence markers (location -> tag, e.g. last_message: r, "
            "documents: c); see ``mellea_local.intrinsics.rewrite``."
        },
    )
    docs_as_message: str | None = field(
        default=None,
        metadata={
            "help": "How documents move into the messages: 'string', 'json' or 'roles'; null: "
            "to the chat template's documents (see ``mellea_local.intrinsics.rewrite``)."
        },
    )
    logprobs_workaround: bool | None = field(
        default=None,
        metadata={
            "help": "Read the output from the final channel of the generated tokens (Harmony "
            "models such as gpt-oss); see ``intrinsics.scoring.final_channel``."
        },
    )
    name: str | None = field(
        default=None, metadata={"help": "Display name of the intrinsic, when the file sets one."}
    )

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> IOConfig:
        """Read and validate an io.yaml file.

        The file may come from the hub, so it is read as data only and bounded: at most
        ``MAX_IO_YAML_BYTES``, ``MAX_IO_YAML_DEPTH`` levels of nesting, no YAML aliases (a few
        hundred bytes of nested aliases expand to billions of nodes) and no duplicate keys.
        """
        path = Path(path)
        try:
            with path.open("rb") as f:
                raw = f.read(MAX_IO_YAML_BYTES + 1)
        except OSError as exc:
            raise IOConfigError(
                f"Cannot read io.yaml at {path}: {exc.strerror or exc}. Every adapter folder "
                "needs one next to adapter_config.json."
            ) from exc
        if len(raw) > MAX_IO_YAML_BYTES:
            raise IOConfigError(
                f"{path} is larger than {MAX_IO_YAML_BYTES} bytes; an io.yaml is a few "
                "kilobytes. Check that the file is the adapter's io.yaml."
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise IOConfigError(
                f"{path} is not UTF-8 text (byte {exc.start}); save the io.yaml as UTF-8."
            ) from exc
        return cls.from_dict(load_yaml_text(text, str(path)), source=str(path))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<dict>") -> IOConfig:
        """Validate a parsed io.yaml mapping; ``source`` names it in error messages."""
        check_depth(data, source)
        if not isinstance(data, Mapping):
            raise IOConfigError(
                f"{source}: an io.yaml must be a mapping of keys such as response_format and "
                f"transformations, not {type(data).__name__}."
            )
        unknown = sorted(str(k) for k in data if k not in _REQUIRED_KEYS + _OPTIONAL_KEYS)
        if unknown:
            allowed = ", ".join(_REQUIRED_KEYS + _OPTIONAL_KEYS)
            raise IOConfigError(
                f"{source}: unknown key(s) {unknown} in io.yaml. Allowed keys: {allowed}; "
                "remove or rename the others."
            )
        missing = [k for k in _REQUIRED_KEYS if k not in data]
        if missing:
            raise IOConfigError(
                f"{source}: io.yaml lacks required key(s) {missing}; write them as null when "
                "the adapter needs none."
            )
        instruction = _optional_str(data, "instruction", source)
        if instruction is not None:
            _template_fields(instruction, source)  # refuse a bad template now, not per call
        response_format = _parse_response_format(data["response_format"], source)
        transformations = parse_transformations(data["transformations"], where=source)
        _check_meaning(response_format, transformations, source)
        return cls(
            source=source,
            model=_optional_str(data, "model", source),
            response_format=response_format,
            transformations=transformations,
            instruction=instruction,
            parameters=_parse_parameters(data.get("parameters"), source),
            sentence_boundaries=_parse_sentence_boundaries(data.get("sentence_boundaries"), source),
            docs_as_message=_parse_docs_as_message(data.get("docs_as_message"), source),
            logprobs_workaround=_parse_optional_bool(data, "logprobs_workaround", source),
            name=_optional_str(data, "name", source),
        )

    # -- instruction ----------------------------------------------------------------------------

    @cached_property
    def instruction_fields(self) -> frozenset[str]:
        """The ``{name}`` fields the instruction template needs (empty without one); parsed
        once (a frozen config: every call of the intrinsic reads it, three times a check)."""
        if self.instruction is None:
            return frozenset()
        return frozenset(_template_fields(self.instruction, self.source))

    def render_instruction(self, **kwargs: Any) -> str:
        """Fill the instruction template; extra keyword arguments are ignored.

        Extras are allowed because callers pass the same set (``requirement``,
        ``last_message``, ...) to every intrinsic, and each template uses a subset.
        """
        if self.instruction is None:
            raise IOConfigError(
                f"{self.source}: this io.yaml has no 'instruction', so there is no message to "
                "render; build the adapter's prompt yourself or add an instruction template."
            )
        missing = sorted(self.instruction_fields - kwargs.keys())
        if missing:
            raise IOConfigError(
                f"{self.source}: the instruction needs {missing}; pass "
                + ", ".join(f"{name}=..." for name in missing)
                + " to render it."
            )
        return self.instruction.format(**kwargs)

    # -- response format and rules ----------------------------------------------------------------

    def response_format_dict(self) -> dict[str, Any] | None:
        """A fresh, mutable copy of the JSON schema (for grammar compilers and json.dumps)."""
        return None if self.response_format is None else _thaw(self.response_format)

    def parameters_dict(self) -> dict[str, Any]:
        """A fresh, mutable copy of ``parameters`` (to merge caller options into)."""
        return _thaw(self.parameters)

    @property
    def needs_logprobs(self) -> bool:
        """Whether the rules score values from token probabilities (a ``likelihood`` rule)."""
        return any(isinstance(rule, LikelihoodRule) for rule in self.transformations or ())

    def fast_path_spec(self) -> FastPathSpec | None:
        """How to score this adapter in one forward pass, or ``None`` when it cannot be."""
        return self._fast_path

    @cached_property
    def _fast_path(self) -> FastPathSpec | None:
        # Decided once per config (it is frozen), not on every check.
        return fast_path_spec(self.transformations, self.response_format)

    def apply_transformations(
        self,
        parsed_json: Any,
        *,
        value_probs: Mapping[ConcretePath | str, Mapping[Category, float]] | None = None,
        logprobs: Sequence[TokenLogprob] | None = None,
        sentences: MarkedInputs | None = None,
        name: str | None = None,
    ) -> Any:
        """Run this config's rules on the adapter's parsed output (see ``transformations``);
        ``sentences`` is the marked request (``decode_sentences`` reads it), ``name`` the
        intrinsic's name for error messages (default: the file's ``name`` or its path)."""
        return apply_transformations(
            self.transformations, parsed_json, value_probs=value_probs, logprobs=logprobs,
            name=name or self.name or self.source, sentences=sentences,
            schema=self.response_format, logprobs_normalised=True,
        )

    def result_from_chat_completion(
        self, request: Mapping[str, Any], content: str,
        logprobs: Mapping[str, Any] | None = None, *, name: str | None = None,
    ) -> Any:
        """The intrinsic's result from an OpenAI-style exchange, as the public result
        processor computes it: ``request`` is the chat-completion request after input
        rewriting (messages with their sentence markers and the instruction turn, documents
        under ``extra_body.documents`` or in the messages per ``docs_as_message``),
        ``content`` the model's message text and ``logprobs`` its ``logprobs`` object
        (``{"content": [{"token", "logprob", "top_logprobs": [...]}]}``).

        For requests rewritten elsewhere (a vLLM server, recorded data); the intrinsic call
        of this package builds the same evidence itself.
        """
        tokens = _token_logprobs(logprobs, self.source) if logprobs is not None else None
        if self.logprobs_workaround and tokens is not None:
            trimmed = final_channel(tokens)
            if trimmed is not tokens:
                tokens, content = trimmed, "".join(t.token for t in trimmed)
        try:
            parsed = json.loads(content)
        except (json.JSONDecodeError, RecursionError, TypeError) as exc:
            raise IntrinsicOutputError(
                f"Intrinsic {name or self.name or self.source!r}: the model output is not JSON "
                f"({str(content)[:120]!r}); raise max_completion_tokens if it was cut off."
            ) from exc
        return self.apply_transformations(parsed, logprobs=tokens, name=name,
                                          sentences=self._marked_from_request(request))

    def _marked_from_request(self, request: Mapping[str, Any]) -> MarkedInputs | None:
        if not self.sentence_boundaries:
            return None
        messages = [m for m in request.get("messages") or [] if isinstance(m, Mapping)]
        texts = [m.get("content") if isinstance(m.get("content"), str) else ""
                 for m in messages]
        last = -2 if self.instruction is not None else -1
        docs: list[tuple[str | None, str]] = []
        if self.docs_as_message == "json" and messages:
            docs = [(d.get("doc_id"), d.get("text", "")) for d in json.loads(texts[0])]
        elif self.docs_as_message == "roles":
            docs = [(str(m.get("role"))[len("document "):], text)
                    for m, text in zip(messages, texts, strict=True)
                    if str(m.get("role", "")).startswith("document ")]
        else:
            extra = request.get("extra_body") or {}
            docs = [(d.get("doc_id"), d.get("text", "")) for d in extra.get("documents") or []]
        return MarkedInputs(
            self.sentence_boundaries,
            last_message=texts[last] if len(texts) >= -last else None,
            documents=tuple(docs), history=tuple(texts[:last]),
        )

    def check_supported(self) -> None:
        """Raise if running the adapter here would silently differ from what the file asks.

        Every key of the public format is implemented; what is refused is what nothing here
        would apply: ``parameters`` other than ``max_completion_tokens`` and ``temperature``,
        a ``decode_sentences`` rule reading a location that ``sentence_boundaries`` does not
        mark, and document sentences decoded from ``docs_as_message: string`` (the labelled
        text cannot be split back into documents). A backend calls this before using the
        adapter; each refusal names the key and the fix.
        """
        unapplied = sorted(set(self.parameters) - set(APPLIED_PARAMETERS))
        if unapplied:
            raise IOConfigError(
                f"{self.source}: parameters {unapplied} are not applied by mellea_local (an "
                "intrinsic decodes greedily and reads probabilities); only "
                f"{list(APPLIED_PARAMETERS)} are. Remove them, or they would be ignored "
                "silently."
            )
        tags = self.sentence_boundaries or {}
        for rule in self.transformations or ():
            if not isinstance(rule, DecodeSentencesRule):
                continue
            untagged = [source for source in rule.source if not tags.get(source)]
            if untagged:
                raise IOConfigError(
                    f"{self.source}: a decode_sentences rule reads {untagged}, but "
                    "sentence_boundaries marks no sentences there; add a tag for "
                    + ", ".join(untagged) + " to sentence_boundaries."
                )
            if "documents" in rule.source and self.docs_as_message == "string":
                raise IOConfigError(
                    f"{self.source}: document sentences cannot be decoded when "
                    "docs_as_message is 'string' (the documents become one labelled text); "
                    "use 'json' or 'roles'."
                )


# --------------------------------------------------------------------------------------------
# Field parsers


def _token_logprobs(logprobs: Mapping[str, Any], source: str) -> list[TokenLogprob]:
    """OpenAI ``logprobs.content`` entries as ``TokenLogprob`` (checked, not trusted)."""
    entries = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not isinstance(entries, list):
        raise IntrinsicOutputError(
            f"{source}: logprobs must be an object with a 'content' list, got {logprobs!r:.80}."
        )
    tokens = []
    for i, entry in enumerate(entries):
        try:
            tops = tuple((str(t["token"]), float(t["logprob"]))
                         for t in entry.get("top_logprobs") or ())
            tokens.append(TokenLogprob(str(entry["token"]), float(entry["logprob"]), tops))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise IntrinsicOutputError(
                f"{source}: logprobs.content[{i}] is not a token entry ({entry!r:.80})."
            ) from exc
        if tokens[-1].logprob > 0 or any(lp > 0 for _, lp in tops):
            raise IntrinsicOutputError(
                f"{source}: logprobs.content[{i}] has a positive log-probability; a "
                "probability cannot exceed 1. The engine's numbers are broken; check the "
                "engine and the model's weights."
            )
    check_token_logprobs(tokens, source)  # NaN, a token twice, a top-k sum past 1
    return tokens


def _optional_str(data: Mapping[str, Any], key: str, source: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise IOConfigError(f"{source}: '{key}' must be a string or null, not {value!r}.")
    return value


def _parse_optional_bool(data: Mapping[str, Any], key: str, source: str) -> bool | None:
    value = data.get(key)
    if value is not None and not isinstance(value, bool):
        raise IOConfigError(f"{source}: '{key}' must be true, false or null, not {value!r}.")
    return value


def _parse_response_format(raw: Any, source: str) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        if json_depth(raw) > MAX_IO_YAML_DEPTH:  # counted without recursion: json.loads
            # would only fail past the interpreter's recursion limit, which callers may raise
            raise IOConfigError(
                f"{source}: 'response_format' nests deeper than {MAX_IO_YAML_DEPTH} levels; "
                "flatten the schema."
            )
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise IOConfigError(
                f"{source}: 'response_format' is not valid JSON ({exc.msg} at line {exc.lineno}, "
                f"column {exc.colno}); write the schema as a JSON string or a YAML mapping."
            ) from exc
    if not isinstance(raw, Mapping):
        raise IOConfigError(
            f"{source}: 'response_format' must be a JSON schema object, not "
            f"{type(raw).__name__}."
        )
    check_depth(raw, source, "'response_format' schema")
    return _freeze(raw)


def _parse_parameters(raw: Any, source: str) -> Mapping[str, Any]:
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) for k in raw):
        raise IOConfigError(f"{source}: 'parameters' must be a mapping of names to values.")
    tokens = raw.get("max_completion_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)
                               or tokens <= 0):
        raise IOConfigError(
            f"{source}: parameters.max_completion_tokens must be a positive integer, not "
            f"{tokens!r}."
        )
    temperature = raw.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, int | float)
        or not math.isfinite(temperature) or temperature < 0
    ):
        raise IOConfigError(
            f"{source}: parameters.temperature must be a number >= 0, not {temperature!r}."
        )
    return _freeze(raw)


def _parse_sentence_boundaries(raw: Any, source: str) -> Mapping[str, str] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in raw.items()
    ):
        raise IOConfigError(
            f"{source}: 'sentence_boundaries' must map locations (last_message, documents, ...) "
            f"to tag strings, not {raw!r}."
        )
    unknown = sorted(set(raw) - set(SENTENCE_SOURCES))
    if unknown:
        raise IOConfigError(
            f"{source}: sentence_boundaries names location(s) {unknown}; the locations are "
            f"{list(SENTENCE_SOURCES)}."
        )
    for location, tag in raw.items():
        if tag is not None and not _TAG.fullmatch(tag):
            raise IOConfigError(
                f"{source}: sentence_boundaries.{location} is {tag!r}; a tag is letters or "
                "'_' (it becomes the marker '<' + tag + number + '>'), e.g. 'c'."
            )
    return MappingProxyType(dict(raw))


_TAG = re.compile(r"[A-Za-z_]+")


def _check_meaning(
    schema: Mapping[str, Any] | None, rules: Sequence[TransformationRule] | None, source: str
) -> None:
    """Refuse an io.yaml whose schema and rules disagree in a way that changes results
    silently: a ``required`` property the schema does not define, a likelihood category the
    output can never hold (YAML 1.1 reads an unquoted yes/no/on/off as a boolean and 1 as an
    integer, which never equal the strings of a string enum), an empty category, or two
    categories one of which begins the other (a token starting both is counted for the first).
    """
    if schema is not None:
        _check_required(schema, source, "response_format")
    for rule in rules or ():
        if not isinstance(rule, LikelihoodRule):
            continue
        categories = list(rule.categories_to_values)
        where = f"{source}: the likelihood rule at {list(rule.input_path)}"
        texts = [c if isinstance(c, str) else json.dumps(c) for c in categories]
        if "" in texts:
            raise IOConfigError(f"{where} has an empty category; every label needs text.")
        for i, a in enumerate(texts):
            for j, b in enumerate(texts):
                if i != j and b.startswith(a) and isinstance(categories[i], str) == isinstance(
                        categories[j], str):
                    raise IOConfigError(
                        f"{where}: category {categories[i]!r} begins category "
                        f"{categories[j]!r}, so their first tokens cannot be told apart; "
                        "use labels where none is a prefix of another."
                    )
        node = _schema_at(schema, rule.input_path) if schema is not None else None
        enum = node.get("enum") if isinstance(node, Mapping) else None
        if enum is None:
            continue
        foreign = [c for c in categories
                   if not any(type(c) is type(v) and c == v for v in enum)]
        if foreign:
            hint = (" (YAML 1.1 reads unquoted yes/no/true/false/on/off as booleans and digits "
                    "as integers: quote them)" if any(not isinstance(c, str) for c in foreign)
                    and all(isinstance(v, str) for v in enum) else "")
            raise IOConfigError(
                f"{where} has categories {foreign} that the response_format enum "
                f"{list(enum)} can never produce{hint}; every category must be an enum value."
            )


def _schema_at(schema: Mapping[str, Any], path: Sequence[Any]) -> Mapping[str, Any] | None:
    """The sub-schema at ``path`` (object properties, array items, local $refs), or None."""
    node = _resolve_ref(schema, schema)
    for element in path:
        if not isinstance(node, Mapping):
            return None
        if isinstance(element, str):
            props = node.get("properties")
            node = props.get(element) if isinstance(props, Mapping) else None
        else:  # an index or a wildcard: the items of an array
            node = node.get("items")
        node = _resolve_ref(schema, node)
    return node if isinstance(node, Mapping) else None


def _resolve_ref(schema: Mapping[str, Any], node: Any) -> Any:
    for _ in range(MAX_IO_YAML_DEPTH):
        ref = node.get("$ref") if isinstance(node, Mapping) else None
        if not (isinstance(ref, str) and ref.startswith("#/")):
            return node
        node = schema
        for part in ref[2:].split("/"):
            node = node.get(part) if isinstance(node, Mapping) else None
    return None


def _check_required(schema: Mapping[str, Any], source: str, where: str) -> None:
    stack: list[tuple[Any, str]] = [(schema, where)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, Mapping):
            required = node.get("required")
            props = node.get("properties")
            if required is not None:
                if not isinstance(required, list | tuple) or not all(
                        isinstance(r, str) for r in required):
                    raise IOConfigError(f"{source}: {at}.required must be a list of names.")
                undefined = [r for r in required
                             if not isinstance(props, Mapping) or r not in props]
                if undefined and (isinstance(props, Mapping)
                                  or node.get("additionalProperties") is False):
                    raise IOConfigError(
                        f"{source}: {at} requires {undefined}, which its 'properties' do not "
                        "define; fix the name or define the property."
                    )
            stack.extend((v, f"{at}.{k}") for k, v in node.items())
        elif isinstance(node, list | tuple):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(node))


def _parse_docs_as_message(raw: Any, source: str) -> str | None:
    if raw is not None and raw not in _DOCS_AS_MESSAGE_MODES:
        raise IOConfigError(
            f"{source}: 'docs_as_message' must be one of {list(_DOCS_AS_MESSAGE_MODES)} or "
            f"null, not {raw!r}."
        )
    return raw


def _template_fields(template: str, source: str) -> list[str]:
    """Names of the template's fields; refuses anything but plain ``{name}`` fields.

    Attribute and index lookups (``{x.__class__}``) are refused because the template comes
    from a downloaded file and str.format would evaluate them against the caller's objects.
    """
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise IOConfigError(
            f"{source}: 'instruction' is not a valid template ({exc}); write literal braces as "
            "'{{' and '}}'."
        ) from exc
    names: list[str] = []
    for _, field_name, format_spec, conversion in parts:
        if field_name is None:
            continue
        if not field_name.isidentifier() or format_spec or conversion:
            raise IOConfigError(
                f"{source}: instruction field {{{field_name}}} is not a plain {{name}} field; "
                "use names only (no positions, attributes, indices or format specs) and write "
                "literal braces as '{{' and '}}'."
            )
        names.append(field_name)
    return names


def _freeze(value: Any) -> Any:
    """A read-only deep copy of parsed JSON/YAML, so a shared config cannot be altered."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value
