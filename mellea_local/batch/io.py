"""The driver's side of the input: which lines go to the actors, which are already done,
which are malformed.

Every line (or Parquet row) is validated here, in the driver, with the ``check`` command's own
parser, before Ray starts: a malformed line is reported with its number exactly as
``--engine local`` reports it, and an input that cannot be read at all (missing, not UTF-8,
not JSONL, Parquet without the needed columns) is one ``CheckFileError`` before any actor
exists. Parsing costs microseconds per line, nothing next to a model call, so it is cheap to
do up front even for millions of lines.

Why the driver reads the file rather than ``ray.data.read_json`` / ``read_parquet``: those
read in parallel on the cluster, but lose line numbers (a malformed line could not be
reported as ``line N``), fail a whole block on one bad line, and only notice a bad file once
the pipeline runs. The price is that the validated rows reach the actors through the object
store from the driver (``from_items``, ~1 GB per million typical lines), fine on one node or
a cluster head; for far larger inputs, split the file and run each part (``-o`` per part).

Rows carry the line's JSON text, not the parsed item: the actor re-parses it with the same
``parse_line``, so both engines build the conversation from identical input.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mellea_local.batch.local import (
    LineError,
    dataset_lines,
    failure_reason,
    parse_line,
    parse_object,
)
from mellea_local.errors import CheckFileError, RayNotInstalledError

INSTALL = "pip install 'mellea-local[ray]'"

PARQUET_SUFFIXES = (".parquet", ".pq")
_REQUIREMENT_COLUMNS = ("requirements", "requirement")


@dataclass
class Pending:
    """What a run has to do: rows for the actors, plus what the driver already knows."""

    rows: list[dict[str, Any]] = field(default_factory=list)  # {"line": n, "text": json}
    total: int = 0  # lines (or Parquet rows) in the input
    skipped: int = 0  # already in the output
    errors: list[tuple[int, str]] = field(default_factory=list)  # malformed, by number



def require_ray() -> Any:
    """The ``ray`` module, or a ``RayNotInstalledError`` naming the extra."""
    try:
        import ray
        import ray.data  # the [data] part: pandas, pyarrow
    except ImportError as exc:
        raise RayNotInstalledError(
            f"--engine ray needs Ray Data, which is not installed ({exc}); install it with "
            f"{INSTALL}, or use --engine local.") from None
    return ray

def is_parquet(path: Path) -> bool:
    """A Parquet input: by its suffix, or by the ``PAR1`` magic of a file named otherwise."""
    if path.suffix.lower() in PARQUET_SUFFIXES:
        return True
    with path.open("rb") as fh:
        return fh.read(4) == b"PAR1"


def read_pending(path: Path, done: set[int]) -> Pending:
    """The rows of ``path`` not in ``done``; malformed ones as (number, reason) errors."""
    if not path.is_file():
        raise CheckFileError(
            f"The input dataset {str(path)!r} does not exist; pass a JSONL or Parquet file.")
    return _parquet(path, done) if is_parquet(path) else _jsonl(path, done)


def _jsonl(path: Path, done: set[int]) -> Pending:
    lines = dataset_lines(path)
    pending = Pending(total=len(lines))
    for number, text in enumerate(lines, start=1):
        if number in done:
            pending.skipped += 1
        elif text.strip():
            _add(pending, number, text, lambda n=number, t=text: parse_line(n, t))
    return pending


def _parquet(path: Path, done: set[int]) -> Pending:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        require_ray()
        raise
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise CheckFileError(
            f"The input dataset {str(path)!r} is not a readable Parquet file "
            f"({failure_reason(exc)}); pass a JSONL or Parquet file.") from None
    schema = pf.schema_arrow
    names = list(schema.names)
    messages_ok = "messages" in names and pa.types.is_list(schema.field("messages").type)
    if not messages_ok or not any(c in names for c in _REQUIREMENT_COLUMNS):
        raise CheckFileError(
            f"The Parquet input {str(path)!r} has the columns {names}; it needs \"messages\" "
            "(a list of {role, content} structs) and \"requirements\" (a list of strings) or "
            "\"requirement\", with optional \"label\" and \"id\". Rename or add the columns.")
    pending = Pending(total=pf.metadata.num_rows)
    number = 0
    for batch in pf.iter_batches(batch_size=8192):
        for raw in batch.to_pylist():
            number += 1
            if number in done:
                pending.skipped += 1
                continue
            # A null cell is an absent field (Parquet has no "missing"), as in a JSONL line.
            obj = {k: v for k, v in raw.items() if v is not None}
            try:
                if "id" in obj:
                    obj["id"] = parquet_id(obj["id"])
            except LineError as exc:
                pending.errors.append((number, failure_reason(exc)))
                continue
            text = json.dumps(obj, default=str)  # parse_object refuses an id JSON cannot hold
            _add(pending, number, text, lambda n=number, o=obj: parse_object(n, o))
    return pending


def parquet_id(value: Any) -> Any:
    """A Parquet ``id`` cell as the JSON value a record carries.

    NaN is how pandas writes a missing number, so it is a missing id (null), as a null cell
    is; it used to be written as a bare ``NaN``, which no JSON reader accepts. A binary id is
    its UTF-8 text (it was written as its Python repr, ``"b'x'"``); binary that is not UTF-8
    is refused with the line.
    """
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise LineError(
                f'"id" is binary that is not UTF-8 text ({bytes(value)[:20]!r}); store ids as '
                "strings or numbers") from None
    # Timestamps, decimals and the like as their text (parse_object refuses a NaN inside).
    return json.loads(json.dumps(value, default=str))


def _add(pending: Pending, number: int, text: str, parse: Any) -> None:
    try:
        parse()
    except LineError as exc:
        pending.errors.append((number, failure_reason(exc)))
        return
    pending.rows.append({"line": number, "text": text})


def is_parquet_output(path: Path) -> bool:
    return path.suffix.lower() in PARQUET_SUFFIXES


def journal_for(output: Path) -> Path:
    """Where a Parquet output's records are appended while the run goes (``OUT.jsonl``).

    Parquet cannot be appended to, so the run writes ``check``'s JSONL records here (flushed,
    resumable, exactly as a JSONL ``-o``) and converts them when it ends. Keep the journal to
    resume or extend the run; the Parquet file is rewritten from it each time.
    """
    return output.with_name(output.name + ".jsonl")


def write_parquet(journal: Path, output: Path) -> None:
    """The journal's records, sorted by line, as one Parquet file (written atomically).

    Columns are the record's fields; ``labels``/``correct`` are null on unlabelled lines.
    An ``id`` column whose values mix JSON types (Parquet needs one) holds their JSON text.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mellea_local.batch.local import _records

    text = journal.read_bytes().decode("utf-8", errors="replace")
    records = sorted(_records(text), key=lambda r: r["line"])
    keys = ["line", "id", "requirements", "scores", "verdicts", "decided_by", "labels",
            "correct", "input_hash"]
    rows = [{k: r.get(k) for k in keys} for r in records]
    try:
        table = pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        table = pa.Table.from_pylist([dict(r, id=json.dumps(r["id"])) for r in rows])
    if not rows:
        table = pa.table({k: pa.array([], pa.null()) for k in keys})
    tmp = output.with_name(output.name + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(output)
