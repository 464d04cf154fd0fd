"""The third bad-input corpus: the surfaces the held-out corpora found soft (issue 34).

Kinds: token-id and count model options, adapter names, adapter folders (an ``alora/`` place
without invocation tokens, symlink loops, JSON nested 100,000 deep), dataset lines (deep JSON,
ids JSON cannot hold, U+2028/U+2029/U+0085 inside strings, one-line files), ``check -o`` on
what is not a regular file, Parquet ids, Ray options, sessions, the prefix cache, tools and
the bounded JSON reader. Each case ends in a typed ``MelleaLocalError`` whose message names
the input and says what to do, or is valid and gives a sane result; every case runs under a
time bound (a hang fails its case). After each case the shared backend holds no active
adapter and the same adapters, and a greedy answer after the whole corpus equals the one
before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from adapter_folders import copy_adapter
from bounded import run_bounded

from mellea_local import (
    ALoraRequirement,
    ChatContext,
    MelleaTool,
    Message,
    ModelOption,
    Requirement,
    ValidationResult,
)
from mellea_local.backends.adapter_registry import check_adapter_name
from mellea_local.backends.kv_cache import PrefixCache
from mellea_local.batch.local import dataset_lines, guard_paths, jsonl_lines
from mellea_local.batch.pipeline import RayOptions, probe_address
from mellea_local.errors import MelleaLocalError
from mellea_local.inputs import MAX_JSON_DEPTH, json_depth, loads_json
from mellea_local.requirements import simple_validate
from mellea_local.requirements.dataset import parse_line
from mellea_local.session import MelleaSession, start_session

TIMEOUT_S = 120  # generous for a loaded CI machine; a hang is minutes to forever
FIX_WORDS = ("use ", "pass ", "give ", "wrap", "leave", "fix", "add ", "remove", "rename",
             "flatten", "return", "store", "save", "point", "start", "call ", "must ",
             "it must be", "escape", "move", "make ")


@dataclass(frozen=True)
class Case:
    """``run(backend, tmp)`` and what must come of it: a typed error naming ``words``, or
    (``error=None``) a result ``valid`` accepts."""

    run: Callable[[Any, Path], Any]
    error: type[BaseException] | None = MelleaLocalError
    words: tuple[str, ...] = ()
    valid: Callable[[Any], bool] = lambda result: True


CASES: dict[str, Case] = {}
SHORT = {ModelOption.MAX_NEW_TOKENS: 3}


def _gen(options: Any) -> Callable[[Any, Path], Any]:
    async def go(backend: Any, tmp: Path) -> str:
        mot, _ = await backend.generate_from_context(
            Message("user", "What is 2 + 2?"), ChatContext(), model_options=options)
        return await mot.avalue()
    return go


def _text(result: Any) -> bool:
    return isinstance(result, str)


# ----- model options: counts and token ids --------------------------------------------------

VOCAB = 4096  # the embedded tokenizer's size (asserted in test_the_vocabulary_is_as_assumed)
for key, value, words in [
        (ModelOption.MAX_NEW_TOKENS, None, "MAX_NEW_TOKENS"),
        (ModelOption.MAX_NEW_TOKENS, 0, "MAX_NEW_TOKENS"),
        (ModelOption.MAX_NEW_TOKENS, -1, "MAX_NEW_TOKENS"),
        ("max_new_tokens", None, "max_new_tokens"),
        ("max_new_tokens", -1, "max_new_tokens"),
        ("num_return_sequences", 3, "num_return_sequences"),
        ("num_return_sequences", 2, "num_return_sequences"),
        ("num_return_sequences", 0, "num_return_sequences"),
        ("num_return_sequences", True, "num_return_sequences"),
        ("num_return_sequences", "3", "num_return_sequences"),
        ("num_return_sequences", 2.0, "num_return_sequences"),
        ("bad_words_ids", "x", "bad_words_ids"),
        ("bad_words_ids", 5, "bad_words_ids"),
        ("bad_words_ids", [5], "bad_words_ids"),
        ("bad_words_ids", [[]], "bad_words_ids"),
        ("bad_words_ids", [], "bad_words_ids"),
        ("bad_words_ids", [["a"]], "bad_words_ids"),
        ("bad_words_ids", [[-1]], "bad_words_ids"),
        ("bad_words_ids", [[1.5]], "bad_words_ids"),
        ("bad_words_ids", [[True]], "bad_words_ids"),
        ("bad_words_ids", [[10**6]], "bad_words_ids"),
        ("bad_words_ids", [[5], [VOCAB]], "bad_words_ids"),
        ("bad_words_ids", {"a": 1}, "bad_words_ids"),
        ("force_words_ids", "x", "force_words_ids"),
        ("suppress_tokens", [10**6], "suppress_tokens"),
        ("suppress_tokens", [VOCAB], "suppress_tokens"),
        ("suppress_tokens", [1, 2, 2**40], "suppress_tokens"),
        ("suppress_tokens", "x", "suppress_tokens"),
        ("suppress_tokens", 5, "suppress_tokens"),
        ("suppress_tokens", [-1], "suppress_tokens"),
        ("suppress_tokens", [True], "suppress_tokens"),
        ("suppress_tokens", [1.0], "suppress_tokens"),
        ("suppress_tokens", [[1]], "suppress_tokens"),
        ("begin_suppress_tokens", [99999], "begin_suppress_tokens"),
        ("begin_suppress_tokens", [VOCAB + 1], "begin_suppress_tokens"),
        ("begin_suppress_tokens", "abc", "begin_suppress_tokens"),
        ("begin_suppress_tokens", [-5], "begin_suppress_tokens"),
        ("forced_eos_token_id", 123456, "forced_eos_token_id"),
        ("forced_eos_token_id", VOCAB, "forced_eos_token_id"),
        ("forced_eos_token_id", [1, 10**6], "forced_eos_token_id"),
        ("forced_eos_token_id", -1, "forced_eos_token_id"),
        ("forced_eos_token_id", "x", "forced_eos_token_id"),
        ("forced_eos_token_id", 1.5, "forced_eos_token_id"),
        ("forced_eos_token_id", True, "forced_eos_token_id"),
        ("forced_bos_token_id", 10**7, "forced_bos_token_id"),
        ("forced_bos_token_id", [1], "forced_bos_token_id"),
        ("eos_token_id", 10**6, "eos_token_id"),
        ("eos_token_id", [-2], "eos_token_id"),
        ("pad_token_id", -1, "pad_token_id"),
        ("pad_token_id", VOCAB * 2, "pad_token_id")]:
    options = {**SHORT, key: value} if key not in (ModelOption.MAX_NEW_TOKENS,
                                                   "max_new_tokens") else {key: value}
    CASES[f"option {key}={value!r}"] = Case(_gen(options), words=(words,))
for options in [{**SHORT, "suppress_tokens": [5]}, {**SHORT, "bad_words_ids": [[5], [7, 9]]},
                {**SHORT, "begin_suppress_tokens": [VOCAB - 1]},
                {**SHORT, "num_return_sequences": 1}, {**SHORT, "suppress_tokens": []},
                {**SHORT, "suppress_tokens": None}, {ModelOption.MAX_NEW_TOKENS: 1}]:
    CASES[f"valid option {options!r}"] = Case(_gen(options), error=None, valid=_text)


# ----- adapter names ------------------------------------------------------------------------

RC = "requirement-check"
for name, words in [("a/b", "path separator"), ("/", "path separator"),
                    ("../../etc", "path separator"), ("a\\b", "path separator"),
                    ("a\x00b", "non-printable"), ("\x00", "non-printable"),
                    ("red\x1b[31m", "non-printable"), ("two\nlines", "non-printable"),
                    ("tab\there", "non-printable"), ("bell\x07", "non-printable"),
                    ("del\x7f", "non-printable"), ("rtl\u202eevil", "non-printable"),
                    ("zero\u200bwidth", "non-printable"), ("line\u2028sep", "non-printable"),
                    ("x" * 10_000, "10,000 characters"), ("y" * 129, "129 characters"),
                    ("", "empty"), ("   ", "empty"), (" lead", "surrounding spaces"),
                    ("trail ", "surrounding spaces"), ("a.b", "dots"), ("..", "dots"),
                    (5, "int"), (b"rc", "bytes"), (["rc"], "list"), (1.5, "float")]:
    CASES[f"adapter name {name!r:.40}"] = Case(
        lambda b, t, n=name: b.add_adapter(RC, name=n), words=(words,))
for name in ["rc-2", "rc_alora", "Ré-check", "x" * 128, "名前"]:
    CASES[f"valid adapter name {name!r:.40}"] = Case(
        lambda b, t, n=name: check_adapter_name(n), error=None, valid=lambda r, n=name: r == n)


# ----- adapter folders ----------------------------------------------------------------------

def _alora_place(tmp: Path, tokens: Any = "drop") -> Path:
    def edit(config: dict[str, Any]) -> None:
        if tokens == "drop":
            config.pop("alora_invocation_tokens", None)
        else:
            config["alora_invocation_tokens"] = tokens
    return copy_adapter(tmp / RC / "mellea-tiny-chat" / "alora", kind="alora", config=edit)


def _lora_place_with_tokens(tmp: Path) -> Path:
    alora = copy_adapter(tmp / "src", kind="alora")
    tokens = json.loads((alora / "adapter_config.json").read_text())["alora_invocation_tokens"]
    return copy_adapter(tmp / RC / "mellea-tiny-chat" / "lora", kind="lora",
                        config=lambda c: c.update(alora_invocation_tokens=tokens))


def _loop(tmp: Path) -> Path:
    (tmp / "a").symlink_to(tmp / "b")
    (tmp / "b").symlink_to(tmp / "a")
    return tmp / "a"


def _deep_config(depth: int, key: str = "x") -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        folder = copy_adapter(tmp / "deep", kind="lora")
        data = json.loads((folder / "adapter_config.json").read_text())
        text = json.dumps(data)[:-1] + f', "{key}": ' + "[" * depth + "]" * depth + "}"
        (folder / "adapter_config.json").write_text(text)
        return folder
    return make


for label, make, words in [
        ("alora/ place without invocation tokens", _alora_place, ("alora_invocation_tokens",
                                                                  "alora")),
        ("alora/ place with null tokens", lambda t: _alora_place(t, None),
         ("alora_invocation_tokens",)),
        ("alora/ place with empty tokens", lambda t: _alora_place(t, []),
         ("alora_invocation_tokens",)),
        ("alora/ place with tokens 'x'", lambda t: _alora_place(t, "x"),
         ("alora_invocation_tokens",)),
        ("alora/ place with negative tokens", lambda t: _alora_place(t, [-1]),
         ("alora_invocation_tokens",)),
        ("alora/ place with tokens beyond the vocabulary", lambda t: _alora_place(t, [10**6]),
         ("invocation token",)),
        ("lora/ place declaring invocation tokens", _lora_place_with_tokens, ("lora",)),
        ("symlink loop", _loop, ("symlink loop",)),
        ("self symlink", lambda t: (t / "s").symlink_to(t / "s") or t / "s", ("s",)),
        ("adapter_config.json nested 100,000 deep", _deep_config(100_000), ("deeper",)),
        ("adapter_config.json nested 5,000 deep", _deep_config(5_000), ("deeper",)),
        ("adapter_config.json nested 201 deep", _deep_config(MAX_JSON_DEPTH + 1), ("deeper",)),
        ("adapter_config.json unbalanced 100,000", lambda t: _write_config(
            t, "[" * 100_000), ("adapter_config.json",)),
        ("adapter_config.json a deep list", lambda t: _write_config(
            t, "[" * 3000 + "]" * 3000), ("deeper",)),
        ("adapter_config.json not UTF-8", lambda t: _write_config(t, b"\xff\xfe{"),
         ("adapter_config.json",))]:
    CASES[f"add_adapter {label}"] = Case(
        lambda b, t, m=make: b.add_adapter(m(t), name="corpus-probe"), words=words)


def _write_config(tmp: Path, text: str | bytes) -> Path:
    folder = copy_adapter(tmp / "bad", kind="lora")
    path = folder / "adapter_config.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return folder


# ----- dataset lines ------------------------------------------------------------------------

CONV = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def _line(**fields: Any) -> str:
    return json.dumps({"messages": CONV, "requirement": "Be kind.", **fields},
                      ensure_ascii=False)


for label, text, words in [
        ("[ x 100,000", "[" * 100_000 + "]" * 100_000, "deeper"),
        ("{ x 100,000", '{"a":' * 100_000 + "1" + "}" * 100_000, "deeper"),
        ("unclosed [ x 100,000", "[" * 100_000, "deeper"),
        ("[ x 1,000", "[" * 1000 + "]" * 1000, "deeper"),
        ("[ x 201", "[" * 201 + "]" * 201, "deeper"),
        ("deep id", _line()[:-1] + ', "id": ' + "[" * 5000 + "]" * 5000 + "}", "deeper"),
        ("deep messages", '{"messages": ' + "[" * 9000 + "]" * 9000 + "}", "deeper"),
        ("deep requirement", '{"requirement": ' + "[" * 9000 + "]" * 9000 + "}", "deeper"),
        ("id NaN", _line()[:-1] + ', "id": NaN}', "id"),
        ("id Infinity", _line()[:-1] + ', "id": Infinity}', "id"),
        ("id -Infinity", _line()[:-1] + ', "id": -Infinity}', "id"),
        ("id [NaN]", _line()[:-1] + ', "id": [NaN]}', "id"),
        ("id 1e400", _line()[:-1] + ', "id": 1e400}', "id"),
        ("id {'a': NaN}", _line()[:-1] + ', "id": {"a": NaN}}', "id"),
        ("raw vertical tab in a string", _line().replace("hello", "hel\x0blo"), "JSON"),
        ("raw NUL in a string", _line().replace("hello", "hel\x00lo"), "JSON"),
        ("U+2028 outside a string", _line().replace(", ", ",\u2028"), "JSON"),
        ("half a U+2028 line", _line().replace("hello", "hel\u2028lo").split("\u2028")[0],
         "JSON"),
        ("brackets in strings but deep", '{"a": "[[[[", "b": ' + "[" * 300 + "]" * 300 + "}",
         "deeper")]:
    CASES[f"dataset line {label}"] = Case(
        lambda b, t, x=text: parse_line(1, x), words=(words,))
for label, char in [("U+2028", "\u2028"), ("U+2029", "\u2029"), ("U+0085", "\x85"),
                    ("U+000C form feed escaped", "\\f"), ("U+001C", "\x1c"),
                    ("U+001D", "\x1d"), ("U+001E", "\x1e"), ("vertical tab escaped", "\\u000b"),
                    ("all three", "\u2028\u2029\x85"), ("bidi", "\u202e"),
                    ("zero width", "\u200b")]:
    content = f"hel{char}lo"
    text = _line().replace("hello", content)
    if char in ("\x1c", "\x1d", "\x1e"):  # raw C0 controls: not legal JSON, a typed error
        CASES[f"dataset line raw {label}"] = Case(
            lambda b, t, x=text: parse_line(1, x), words=("JSON",))
        continue
    want = json.loads(text)["messages"][1]["content"]
    CASES[f"valid dataset line {label}"] = Case(
        lambda b, t, x=text: parse_line(1, x), error=None,
        valid=lambda item, w=want: item.messages[1][1] == w)
for label, text in [("[ x 200", "[" * 199 + "]" * 199), ("id 1e308", _line(id=1e308)),
                    ("id nested 50", _line(id=[[[[1]]]])), ("id string NaN", _line(id="NaN"))]:
    CASES[f"valid-JSON dataset line {label}"] = Case(
        lambda b, t, x=text: loads_json(x, "the line"), error=None,
        valid=lambda r: r is not None)


def _file(tmp: Path, text: str | bytes, name: str = "data.jsonl") -> Path:
    path = tmp / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return path


SEP_LINES = [_line(id=i).replace("hello", f"a{c}b") for i, c in
             enumerate(["\u2028", "\u2029", "\x85", "\u2028\u2029"])]
for label, text, count in [
        ("U+2028/U+2029/U+0085 inside strings", "\n".join(SEP_LINES) + "\n", 4),
        ("the same without a final newline", "\n".join(SEP_LINES), 4),
        ("CRLF endings", "\r\n".join(SEP_LINES) + "\r\n", 4),
        ("one line with U+2028", SEP_LINES[0] + "\n", 1),
        ("one line, deep", "[" * 100_000 + "]" * 100_000 + "\n", 1),
        ("one line, not JSON", "hello, world\n", 1),
        ("one line, NaN id", _line()[:-1] + ', "id": NaN}\n', 1),
        ("blank lines kept in the count", SEP_LINES[0] + "\n\n" + SEP_LINES[1] + "\n", 3),
        ("a lone \\r inside the line", _line().replace(", ", ",\r") + "\n", 1),
        ("form feed between lines", SEP_LINES[0] + "\n\x0c\n" + SEP_LINES[1] + "\n", 3)]:
    CASES[f"valid dataset file {label}"] = Case(
        lambda b, t, x=text: len(dataset_lines(_file(t, x))), error=None,
        valid=lambda n, c=count: n == c)
CASES["jsonl_lines keeps separators inside strings"] = Case(
    lambda b, t: jsonl_lines("a\u2028b\nc\u2029d\x85e\n"), error=None,
    valid=lambda r: r == ["a\u2028b", "c\u2029d\x85e"])
for label, text, words in [
        ("two lines, neither JSON", "a,b\nc,d\n", "not JSONL"),
        ("three deep lines", ("[" * 5000 + "]" * 5000 + "\n") * 3, "not JSONL"),
        ("not UTF-8", b"\xff\xfe\n\xff\n", "UTF-8")]:
    CASES[f"dataset file {label}"] = Case(
        lambda b, t, x=text: dataset_lines(_file(t, x)), words=(words,))


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "out.fifo")
    return tmp / "out.fifo"


for label, make, words in [
        ("a FIFO", _fifo, ("FIFO",)), ("a directory", lambda t: t, ("directory",)),
        ("/dev/null", lambda t: Path("/dev/null"), ("/dev/null",)),
        ("the input itself", lambda t: t / "data.jsonl", ("input dataset itself",))]:
    CASES[f"check -o {label}"] = Case(
        lambda b, t, m=make: guard_paths(_file(t, _line() + "\n"), m(t)), words=words)
CASES["check -o a new file"] = Case(
    lambda b, t: guard_paths(_file(t, _line() + "\n"), t / "new.jsonl"), error=None)
CASES["check input a FIFO"] = Case(lambda b, t: dataset_lines(_fifo(t)),
                                   words=("not a regular file",))


# ----- Parquet ids --------------------------------------------------------------------------

def _parquet(tmp: Path, ids: list[Any]) -> Any:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from mellea_local.batch.io import read_pending

    table = pa.table({"id": ids, "messages": [CONV] * len(ids),
                      "requirement": ["Be kind."] * len(ids)})
    pq.write_table(table, tmp / "data.parquet")
    pending = read_pending(tmp / "data.parquet", set())
    return pending


def _ids_json(pending: Any) -> list[Any]:
    return [json.loads(row["text"]).get("id") for row in pending.rows]


for label, ids, want, errors in [
        ("NaN", [float("nan"), 2.0], [None, 2.0], 0),
        ("bytes", [b"abc", b"x y"], ["abc", "x y"], 0),
        ("bytes not UTF-8", [b"\xff", b"ok"], ["ok"], 1),
        ("Infinity", [float("inf"), 1.0], [1.0], 1),
        ("-Infinity", [float("-inf")], [], 1),
        ("strings", ["a", "b"], ["a", "b"], 0),
        ("ints", [1, 2], [1, 2], 0)]:
    CASES[f"valid Parquet ids {label}"] = Case(
        lambda b, t, i=ids: _parquet(t, i), error=None,
        valid=lambda p, w=want, e=errors: _ids_json(p) == w and len(p.errors) == e
        and all("id" in reason for _, reason in p.errors))


def _parquet_typed(tmp: Path, array: Any) -> Any:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from mellea_local.batch.io import read_pending

    table = pa.table({"id": array(pa), "messages": [CONV], "requirement": ["Be kind."]})
    pq.write_table(table, tmp / "data.parquet")
    return read_pending(tmp / "data.parquet", set())


for label, array, want in [
        ("timestamp", lambda pa: pa.array([0], pa.timestamp("s")), ["1970-01-01 00:00:00"]),
        ("decimal", lambda pa: pa.array([1], pa.decimal128(5, 2)), ["1.00"]),
        ("struct", lambda pa: pa.array([{"a": 1}]), [{"a": 1}])]:
    CASES[f"valid Parquet id {label}"] = Case(
        lambda b, t, a=array: _parquet_typed(t, a), error=None,
        valid=lambda p, w=want: _ids_json(p) == w and not p.errors)
for label, array in [("struct holding NaN", lambda pa: pa.array([{"a": float("nan")}])),
                     ("list holding NaN", lambda pa: pa.array([[1.0, float("nan")]]))]:
    CASES[f"valid Parquet id {label} (the row refused)"] = Case(
        lambda b, t, a=array: _parquet_typed(t, a), error=None,
        valid=lambda p: not p.rows and "id" in p.errors[0][1])


def _resume_from(tmp: Path, text: str) -> Any:
    from mellea_local.batch.local import read_done

    (tmp / "out.jsonl").write_text(text)
    return read_done(tmp / "out.jsonl")


for label, text in [("line true", '{"line": true, "scores": []}\n'),
                    ("line -5", '{"line": -5, "scores": []}\n'),
                    ("line 0", '{"line": 0, "scores": []}\n'),
                    ("line 1.0", '{"line": 1.0, "scores": []}\n'),
                    ("line deep", '{"line": 1, "scores": [], "x": ' + "[" * 100_000
                     + "]" * 100_000 + "}\n")]:
    CASES[f"check -o holding a record with {label}"] = Case(
        lambda b, t, x=text: _resume_from(t, x), words=("not a check record",))
CASES["valid check -o with a U+2028 in a record"] = Case(
    lambda b, t: _resume_from(t, '{"line": 2, "scores": [], "id": "a\u2028b"}\n'),
    error=None, valid=lambda done: done == {2})
for label, text in [("content", '{"messages": [{"role": "assistant", "content": "\\ud800"}], '
                                '"requirement": "r"}'),
                    ("reasoning", '{"messages": [{"role": "assistant", "content": "x", '
                                  '"reasoning_content": "\\udfff"}], "requirement": "r"}'),
                    ("requirement", '{"messages": [{"role": "assistant", "content": "x"}], '
                                    '"requirements": ["ok", "\\udc00"]}')]:
    CASES[f"dataset line lone surrogate in {label}"] = Case(
        lambda b, t, x=text: parse_line(1, x), words=("lone surrogate",))


def _ray_run(**kwargs: Any) -> Callable[[Any, Path], Any]:
    def go(b: Any, tmp: Path) -> Any:
        pytest.importorskip("ray")
        from mellea_local.batch import run

        args = {"input_path": _file(tmp, _line() + "\n"), "output": tmp / "o.jsonl", **kwargs}
        return run(args.pop("input_path"), args.pop("output"), **args)
    return go


for kwargs, words in [({"input_path": 5}, "input_path"), ({"output": None}, "output"),
                      ({"options": "x"}, "RayOptions"), ({"options": {"actors": 2}}, "RayOptions"),
                      ({"output": b"o.jsonl"}, "output")]:
    CASES[f"batch.run({kwargs!r})"] = Case(_ray_run(**kwargs), words=(words,))


# ----- Ray options --------------------------------------------------------------------------

for kwargs, words in [
        ({"actors": True}, "--actors"), ({"actors": False}, "--actors"),
        ({"actors": 0}, "--actors"), ({"actors": -1}, "--actors"), ({"actors": 1.5}, "--actors"),
        ({"actors": "2"}, "--actors"), ({"actors": None}, "--actors"),
        ({"batch_size": 0}, "--batch-size"), ({"batch_size": True}, "--batch-size"),
        ({"batch_size": 2.5}, "--batch-size"), ({"batch_size": "8"}, "--batch-size"),
        ({"gpus_per_actor": -1}, "--gpus-per-actor"),
        ({"gpus_per_actor": math.nan}, "--gpus-per-actor"),
        ({"gpus_per_actor": math.inf}, "--gpus-per-actor"),
        ({"gpus_per_actor": "1"}, "--gpus-per-actor"),
        ({"gpus_per_actor": True}, "--gpus-per-actor"),
        ({"cpus_per_actor": math.inf}, "cpus_per_actor"),
        ({"cpus_per_actor": math.nan}, "cpus_per_actor"),
        ({"cpus_per_actor": 0}, "cpus_per_actor"), ({"cpus_per_actor": -1}, "cpus_per_actor"),
        ({"cpus_per_actor": "1"}, "cpus_per_actor"), ({"cpus_per_actor": True}, "cpus_per_actor"),
        ({"threads": 1.5}, "threads"), ({"threads": 0}, "threads"), ({"threads": True}, "threads"),
        ({"threads": "2"}, "threads"), ({"max_restarts": -1}, "max_restarts"),
        ({"max_restarts": 1.5}, "max_restarts"), ({"max_task_retries": None}, "max_task_retries"),
        ({"address": ""}, "--ray-address"), ({"address": "  "}, "--ray-address"),
        ({"address": 5}, "--ray-address")]:
    CASES[f"RayOptions({kwargs!r})"] = Case(lambda b, t, k=kwargs: RayOptions(**k),
                                            words=(words,))
for kwargs in [{}, {"threads": None}, {"cpus_per_actor": 0.5}, {"gpus_per_actor": 0.5},
               {"actors": 4, "batch_size": 1}, {"address": "auto"}]:
    CASES[f"valid RayOptions({kwargs!r})"] = Case(lambda b, t, k=kwargs: RayOptions(**k),
                                                  error=None)
for address, words in [("127.0.0.1:1", "ray start"), ("ray://127.0.0.1:1", "ray start"),
                       ("127.0.0.1:x", "port"), ("127.0.0.1:0", "port"),
                       ("127.0.0.1:99999", "port"), ("[::1]:1", "ray start")]:
    CASES[f"--ray-address {address}"] = Case(lambda b, t, a=address: probe_address(a),
                                             words=(address, words))


# ----- sessions, the prefix cache -----------------------------------------------------------

def _session(backend: Any) -> MelleaSession:
    return MelleaSession(backend, ChatContext())


for label, call, words in [
        ("MelleaSession(None)", lambda b, t: MelleaSession(None), ("backend",)),
        ("MelleaSession(5)", lambda b, t: MelleaSession(5), ("backend",)),
        ("MelleaSession('hf')", lambda b, t: MelleaSession("hf"), ("backend",)),
        ("MelleaSession(ctx='x')", lambda b, t: MelleaSession(b, "x"), ("ctx",)),
        ("MelleaSession(ctx=[])", lambda b, t: MelleaSession(b, []), ("ctx",)),
        ("start_session(ctx='x')", lambda b, t: start_session(ctx="x"), ("ctx",)),
        ("start_session(ctx=5)", lambda b, t: start_session(ctx=5), ("ctx",)),
        ("start_session('hf', None, 'x')", lambda b, t: start_session("hf", None, "x"),
         ("ctx",)),
        ("start_session(context_type='x')", lambda b, t: start_session(context_type="x"),
         ("context_type",)),
        ("start_session(backend_name='ollama')", lambda b, t: start_session("ollama"),
         ("backend_name",)),
        ("instruct(requirements='one string')", lambda b, t: _session(b).instruct(
            "Say hi.", requirements="one string", model_options=SHORT), ("wrap it in a list",)),
        ("act(requirements='one string')", lambda b, t: _session(b).act(
            Message("user", "hi"), requirements="Be short.", model_options=SHORT),
         ("wrap it in a list",)),
        ("instruct(requirements=5)", lambda b, t: _session(b).instruct(
            "Say hi.", requirements=5, model_options=SHORT), ("requirements",)),
        ("instruct(requirements=b'x')", lambda b, t: _session(b).instruct(
            "Say hi.", requirements=b"x", model_options=SHORT), ("requirements",)),
        ("instruct(requirements=[5])", lambda b, t: _session(b).instruct(
            "Say hi.", requirements=[5], model_options=SHORT), ("5",)),
        ("misspelt user variable", lambda b, t: _session(b).instruct(
            "Say hi to {{nmae}}.", user_variables={"name": "Ann"}, model_options=SHORT),
         ("nmae", "name")),
        ("user_variables a list", lambda b, t: _session(b).instruct(
            "Say {{x}}.", user_variables=[("x", 1)], model_options=SHORT), ("user_variables",)),
        ("broken template", lambda b, t: _session(b).instruct(
            "Say {{x.", user_variables={"x": 1}, model_options=SHORT), ("template",)),
        ("chat misspelt variable", lambda b, t: _session(b).chat(
            "{{grreting}}", user_variables={"greeting": "hi"}, model_options=SHORT),
         ("grreting",))]:
    CASES[f"session {label}"] = Case(call, words=words)
for label, call, words in [
        ("instruct(strategy='x')", lambda b, t: _session(b).instruct(
            "hi", strategy="x", model_options=SHORT), "strategy"),
        ("instruct(strategy=5)", lambda b, t: _session(b).instruct(
            "hi", strategy=5, model_options=SHORT), "strategy"),
        ("act(strategy=[])", lambda b, t: _session(b).act(
            Message("user", "hi"), strategy=[], model_options=SHORT), "strategy"),
        ("instruct(tool_calls='yes')", lambda b, t: _session(b).instruct(
            "hi", tool_calls="yes", model_options=SHORT), "tool_calls"),
        ("instruct(return_sampling_results='no')", lambda b, t: _session(b).instruct(
            "hi", return_sampling_results="no", model_options=SHORT),
         "return_sampling_results"),
        ("act(return_sampling_results=1)", lambda b, t: _session(b).act(
            Message("user", "hi"), return_sampling_results=1, model_options=SHORT),
         "return_sampling_results"),
        ("sandbox escape in a template", lambda b, t: _session(b).chat(
            "{{ ''.__class__.__mro__[1].__subclasses__() }}", user_variables={"a": 1},
            model_options=SHORT), "template")]:
    CASES[f"session {label}"] = Case(call, words=(words,))
CASES["valid session instruct with a list"] = Case(
    lambda b, t: _session(b).instruct("Say {{w}}.", user_variables={"w": "hi"},
                                      requirements=["Be short."], strategy=None,
                                      model_options=SHORT).value, error=None, valid=_text)
for budget, words in [(1.5, "int"), ("10", "str"), (None, "NoneType"), (True, "bool"),
                      (-1, "below 0"), (math.inf, "float"), ([100], "list")]:
    CASES[f"PrefixCache({budget!r})"] = Case(lambda b, t, n=budget: PrefixCache(n),
                                             words=("token_budget", words))
for budget in [0, 1, 4096]:
    CASES[f"valid PrefixCache({budget})"] = Case(
        lambda b, t, n=budget: PrefixCache(n).token_budget, error=None,
        valid=lambda r, n=budget: r == n)


# ----- tools --------------------------------------------------------------------------------

def _half(x: float) -> float:
    """Half a number.

    Args:
        x: the number
    """
    return x / 2


def _count(n: int) -> int:
    """Count.

    Args:
        n: how many
    """
    return n


def _gen_tool(n: int):
    """Yield numbers.

    Args:
        n: how many
    """
    yield from range(n)


async def _agen_tool(n: int):
    """Yield numbers, async.

    Args:
        n: how many
    """
    yield n


class _GenCallable:
    def __call__(self, n: int):
        yield n


for label, fn in [("generator function", _gen_tool), ("async generator", _agen_tool),
                  ("callable object whose __call__ yields", _GenCallable())]:
    CASES[f"tool from a {label}"] = Case(lambda b, t, f=fn: MelleaTool.from_callable(f, "gen"),
                                         words=("generator", "list"))
for label, raw, tool in [("1e400", '{"x": 1e400}', _half), ("-1e400", '{"x": -1e400}', _half),
                         ("NaN", '{"x": NaN}', _half), ("Infinity", '{"x": Infinity}', _half),
                         ("int 1e400", '{"n": 1e400}', _count)]:
    CASES[f"tool argument {label}"] = Case(
        lambda b, t, r=raw, f=tool: MelleaTool.from_callable(f).run(**json.loads(r)),
        error=None, valid=lambda out: (isinstance(out, str) and "finite" in out)
        or (isinstance(out, str) and "Invalid arguments" in out))
CASES["valid tool argument 1e300"] = Case(
    lambda b, t: MelleaTool.from_callable(_half).run(**json.loads('{"x": 1e300}')),
    error=None, valid=lambda out: out == 5e299)


# ----- requirement and tool constructors ----------------------------------------------------

for label, call, words in [
        ("Requirement(check_only='yes')", lambda: Requirement("x", check_only="yes"),
         "check_only"),
        ("Requirement(check_only=1)", lambda: Requirement("x", check_only=1), "check_only"),
        ("Requirement(check_only=None)", lambda: Requirement("x", check_only=None),
         "check_only"),
        ("Requirement(5)", lambda: Requirement(5), "description"),
        ("Requirement(b'x')", lambda: Requirement(b"x"), "description"),
        ("Requirement(validation_fn=5)", lambda: Requirement("x", validation_fn=5),
         "validation_fn"),
        ("Requirement(output_to_bool='yes')", lambda: Requirement("x", output_to_bool="yes"),
         "output_to_bool"),
        ("ALoraRequirement(intrinsic_name=5)", lambda: ALoraRequirement("x", intrinsic_name=5),
         "intrinsic_name"),
        ("ALoraRequirement(intrinsic_name='')", lambda: ALoraRequirement("x", intrinsic_name=""),
         "intrinsic_name"),
        ("ALoraRequirement(intrinsic_name='  ')",
         lambda: ALoraRequirement("x", intrinsic_name="  "), "intrinsic_name"),
        ("ALoraRequirement('')", lambda: ALoraRequirement(""), "description"),
        ("ALoraRequirement(None)", lambda: ALoraRequirement(None), "description"),
        ("simple_validate(5)", lambda: simple_validate(5), "simple_validate"),
        ("simple_validate('len')", lambda: simple_validate("len"), "simple_validate"),
        ("simple_validate(None)", lambda: simple_validate(None), "simple_validate"),
        ("ValidationResult(score=nan)", lambda: ValidationResult(True, score=math.nan), "score"),
        ("ValidationResult(score=inf)", lambda: ValidationResult(True, score=math.inf), "score"),
        ("ValidationResult(score='0.5')", lambda: ValidationResult(True, score="0.5"), "score"),
        ("ValidationResult(score=True)", lambda: ValidationResult(True, score=True), "score"),
        ("ValidationResult(score=[1])", lambda: ValidationResult(True, score=[1]), "score"),
        ("ValidationResult(reason=5)", lambda: ValidationResult(True, reason=5), "reason"),
        ("ValidationResult(reason=b'x')", lambda: ValidationResult(True, reason=b"x"),
         "reason"),
        ("tool description=5", lambda: MelleaTool.from_callable(_half, description=5),
         "description"),
        ("tool description=b'x'", lambda: MelleaTool.from_callable(_half, description=b"x"),
         "description"),
        ("tool name 'a/b'", lambda: MelleaTool.from_callable(_half, "a/b"), "a/b"),
        ("tool name with NUL", lambda: MelleaTool.from_callable(_half, "a\x00b"), "name"),
        ("tool name with ESC", lambda: MelleaTool.from_callable(_half, "a\x1bb"), "name"),
        ("tool name of 10,000 characters", lambda: MelleaTool.from_callable(_half, "a" * 10_000),
         "name"),
        ("tool name with a space", lambda: MelleaTool.from_callable(_half, "my tool"), "name"),
        ("tool name 5", lambda: MelleaTool.from_callable(_half, 5), "name")]:
    CASES[f"constructor {label}"] = Case(lambda b, t, c=call: c(), words=(words,))
for label, call, check in [
        ("Requirement(check_only=True)", lambda: Requirement("x", check_only=True),
         lambda r: r.check_only is True),
        ("ALoraRequirement(intrinsic_name=None)", lambda: ALoraRequirement("x", None),
         lambda r: r.intrinsic_name == "requirement-check"),
        ("ValidationResult(score=0.3)", lambda: ValidationResult(False, score=0.3),
         lambda r: r.score == 0.3 and not r.result),
        ("ValidationResult(score=7, reason='ok')",
         lambda: ValidationResult(True, score=7, reason="ok"), lambda r: r.reason == "ok"),
        ("simple_validate(lambda)", lambda: simple_validate(lambda text: True), callable),
        ("tool description=''", lambda: MelleaTool.from_callable(_half, description=""),
         lambda r: r.name == "_half"),
        ("tool name 'half-2'", lambda: MelleaTool.from_callable(_half, "half-2"),
         lambda r: r.name == "half-2")]:
    CASES[f"valid constructor {label}"] = Case(lambda b, t, c=call: c(), error=None, valid=check)


# ----- the bounded JSON reader --------------------------------------------------------------

for label, text in [("[ x 100,000", "[" * 100_000 + "]" * 100_000),
                    ("{ x 100,000 unbalanced", "{" * 100_000),
                    ("bytes nested 300", b"[" * 300 + b"]" * 300)]:
    CASES[f"loads_json {label}"] = Case(
        lambda b, t, x=text: _typed_json(x), words=("deeper",))
CASES["json_depth ignores brackets in strings"] = Case(
    lambda b, t: json_depth('["[[[[", {"a": "]]]"}]'), error=None, valid=lambda d: d == 2)
CASES["json_depth of 100,000"] = Case(
    lambda b, t: json_depth("[" * 100_000 + "]" * 100_000), error=None,
    valid=lambda d: d == 100_000)


def _typed_json(text: str | bytes) -> Any:
    try:
        return loads_json(text, "the text")
    except json.JSONDecodeError as exc:  # what callers turn into their typed error
        raise _JSONRefused(str(exc)) from None


class _JSONRefused(MelleaLocalError):
    """Stands for the caller's own typed error (LineError, AdapterError) in this corpus."""


# ----- running the corpus -------------------------------------------------------------------

def _outcome(case: Case, backend: Any, tmp: Path) -> Any:
    def call() -> Any:
        result = case.run(backend, tmp)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        return result
    result, exc = run_bounded(call, TIMEOUT_S)
    if exc is not None:
        raise exc
    return result


@pytest.fixture(scope="module")
def corpus_backend():
    """A backend of its own: cases try add_adapter, which must leave it unchanged."""
    from mellea_local.backends.huggingface import LocalHFBackend

    return LocalHFBackend.embedded()


@pytest.mark.parametrize("name", list(CASES))
def test_surface_input(name, corpus_backend, tmp_path):
    case = CASES[name]
    loaded = sorted(corpus_backend.adapters)
    if case.error is None:
        assert case.valid(_outcome(case, corpus_backend, tmp_path)), name
    else:
        with pytest.raises(case.error) as caught:
            _outcome(case, corpus_backend, tmp_path)
        exc = caught.value
        assert isinstance(exc, MelleaLocalError), f"raw {type(exc).__name__}: {exc}"
        message = str(exc)
        for word in case.words:
            assert word in message, (name, message)
        if not isinstance(exc, _JSONRefused) and "dataset line" not in name:
            assert any(w in message.lower() for w in FIX_WORDS), f"no fix in: {message}"
    # Whatever happened: no adapter active, the same adapters loaded.
    assert corpus_backend.engine.holder.active_adapter is None
    assert sorted(corpus_backend.adapters) == loaded


def test_the_vocabulary_is_as_assumed(corpus_backend):
    assert len(corpus_backend.tokenizer) == VOCAB


def test_the_backend_answers_the_same_after_the_corpus(corpus_backend, tmp_path):
    before = _outcome(Case(_gen({ModelOption.MAX_NEW_TOKENS: 8})), corpus_backend, tmp_path)
    for i, case in enumerate(CASES.values()):
        folder = tmp_path / f"c{i}"
        folder.mkdir()
        with contextlib.suppress(MelleaLocalError):
            _outcome(case, corpus_backend, folder)
    after = _outcome(Case(_gen({ModelOption.MAX_NEW_TOKENS: 8})), corpus_backend, tmp_path)
    assert after == before


def test_adding_an_adapter_again_says_so(corpus_backend, caplog):
    first = corpus_backend.add_adapter(RC)  # the embedded backend has it already
    with caplog.at_level(logging.WARNING, logger="mellea_local.backends.adapter_registry"):
        again = corpus_backend.add_adapter(RC)
    assert again is first
    assert any("already loaded" in r.getMessage() and "nothing was done" in r.getMessage()
               for r in caplog.records)
    assert corpus_backend.engine.holder.active_adapter is None


def test_hypothesis_runs_without_a_deadline():
    from hypothesis import settings

    assert settings.default.deadline is None


def test_the_surface_corpus_is_big_enough():
    assert len(CASES) >= 280
    assert sum(c.error is None for c in CASES.values()) >= 60  # valid controls


def _mixed_dataset(tmp: Path) -> Path:
    lines = [
        "[" * 100_000 + "]" * 100_000,                                  # 1: deep, refused
        _line(id="a").replace("hello", "hel\u2028lo"),                  # 2: valid, U+2028
        _line(id="b").replace("hello", "x\u2029y\x85z"),                # 3: valid
        _line()[:-1] + ', "id": NaN}',                                   # 4: id refused
        _line(id="e"),                                                   # 5: valid
    ]
    return _file(tmp, "\n".join(lines) + "\n")


def test_the_ray_driver_reads_every_line_by_its_number(tmp_path):
    """Deep JSON and a NaN id are errors of their own lines; the separators inside strings
    keep their lines whole, so every number (the resume key) is the line's own."""
    pytest.importorskip("ray")
    from mellea_local.batch.io import read_pending

    pending = read_pending(_mixed_dataset(tmp_path), set())
    assert pending.total == 5
    assert [row["line"] for row in pending.rows] == [2, 3, 5]
    assert [n for n, _ in pending.errors] == [1, 4]
    assert [json.loads(r["text"])["id"] for r in pending.rows] == ["a", "b", "e"]


def test_the_local_engine_checks_every_valid_line_and_resumes_by_number(corpus_backend,
                                                                        tmp_path):
    from rich.console import Console

    from mellea_local.batch.local import run_check

    data, out = _mixed_dataset(tmp_path), tmp_path / "out.jsonl"
    quiet = Console(file=open(os.devnull, "w"), stderr=False)  # noqa: SIM115
    summary = run_check(data, out, corpus_backend, console=quiet)
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["line"] for r in records] == [2, 3, 5]
    assert [r["id"] for r in records] == ["a", "b", "e"]
    assert [n for n, _ in summary.errors] == [1, 4] and summary.checked == 3
    again = run_check(data, out, corpus_backend, console=quiet)
    assert again.checked == 0 and again.skipped == 3
