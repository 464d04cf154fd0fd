"""``check --engine ray`` on a real single-node Ray and the real embedded model.

Every comparison is against ``--engine local`` on the same file: the Ray engine must write
the same records (scores within 1e-6, verdicts identical), report the same malformed lines,
resume the same way, and lose or duplicate nothing when an actor process is killed.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mellea_local.cli import app

from .conftest import INSTALL_HINT
from .data import assert_same_records, mixed_lines, read_jsonl, write

runner = CliRunner()


def _cli(*args: str):
    return runner.invoke(app, ["check", *map(str, args)])


def _skips(output: str) -> dict[int, str]:
    """{line: reason} of the 'line N: skipped: reason' warnings a run printed."""
    found = {}
    for ln in output.splitlines():
        if ln.startswith("line ") and ": skipped: " in ln:
            head, reason = ln.split(": skipped: ", 1)
            found[int(head.removeprefix("line "))] = reason
    return found


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> dict:
    """The mixed dataset and what ``--engine local`` makes of it (the reference)."""
    root = tmp_path_factory.mktemp("mixed")
    lines, bad = mixed_lines()
    data = write(root / "data.jsonl", lines)
    out = root / "local.jsonl"
    result = _cli(data, "-o", out)
    assert result.exit_code == 3, result.output  # finished, with malformed lines
    return {"data": data, "bad": bad, "records": read_jsonl(out), "output": result.output}


def test_ray_output_equals_local_record_for_record(ray_cluster, mixed, tmp_path):
    out = tmp_path / "ray.jsonl"
    result = _cli(mixed["data"], "-o", out, "--pool", "ray", "--actors", 2,
                  "--batch-size", 3)
    assert result.exit_code == 3, result.output
    records = read_jsonl(out)
    assert_same_records(records, mixed["records"])
    assert len(records) == 12 and {len(r["scores"]) for r in records} == {1, 2, 3}
    assert any("labels" in r for r in records) and any("labels" not in r for r in records)
    # The same malformed lines, with the same reasons, and the same closing report.
    assert _skips(result.output) == _skips(mixed["output"])
    assert set(_skips(result.output)) == set(mixed["bad"])
    for number, words in mixed["bad"].items():
        assert words in _skips(result.output)[number]
    tail = [ln for ln in result.output.splitlines() if ln.startswith(("checked", "accuracy"))]
    want = [ln for ln in mixed["output"].splitlines() if ln.startswith(("checked", "accuracy"))]
    assert [t.split(" -> ")[0] for t in tail] == [w.split(" -> ")[0] for w in want]
    assert any(t.startswith("accuracy: ") for t in tail)


def test_rerun_resumes_a_torn_output_and_redoes_only_missing_lines(ray_cluster, mixed,
                                                                   tmp_path):
    from mellea_local.batch import RayOptions, run

    reference = mixed["records"]
    kept = dict(reference[1], scores=[0.0, 1.0], verdicts=[False, True])  # marked: not redone
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps(reference[0]) + "\n" + json.dumps(kept) + "\n"
                   + json.dumps(reference[2])[:40])  # the driver died mid-write
    summary = run(mixed["data"], out, options=RayOptions(actors=1, batch_size=4))
    records = read_jsonl(out)
    assert records[1] == kept
    assert_same_records([records[0], *records[2:]], [reference[0], *reference[2:]])
    assert (summary.checked, summary.skipped) == (len(reference) - 2, 2)
    again = run(mixed["data"], out, options=RayOptions(actors=1))
    assert (again.checked, again.skipped) == (0, len(reference))
    assert read_jsonl(out) == records


def test_a_killed_actor_is_restarted_and_nothing_is_lost_or_duplicated(ray_cluster,
                                                                       tmp_path):
    from mellea_local.batch import BatchEvent, RayOptions, run

    lines = [json.dumps({"id": i, "messages": [{"role": "user", "content": f"q{i}"},
                                               {"role": "assistant", "content": "paris"}],
                         "requirement": "Mention paris."}) for i in range(1, 41)]
    data = write(tmp_path / "data.jsonl", lines)
    killed: list[int] = []
    seen_after: set[int] = set()

    def kill_first_actor(event: BatchEvent) -> None:
        if not killed and event.done < event.total:
            [pid] = event.pids  # one actor so far
            os.kill(pid, signal.SIGKILL)  # mid-run: its queued blocks must be redone
            killed.append(pid)
        elif killed:
            seen_after.update(event.pids)

    out = tmp_path / "ray.jsonl"
    summary = run(data, out, options=RayOptions(actors=1, batch_size=2),
                  observer=kill_first_actor)
    records = read_jsonl(out)
    assert killed and seen_after - set(killed), "no restarted actor returned rows"
    assert [r["line"] for r in records] == list(range(1, 41))  # none lost, none twice
    assert summary.checked == 40 and not summary.errors
    local = tmp_path / "local.jsonl"
    assert _cli(data, "-o", local).exit_code == 0
    assert_same_records(records, read_jsonl(local))


def _as_parquet_rows(lines: list[str], numbers: list[int]) -> list[dict]:
    """The given lines as rows of one Parquet schema: every key in every row (null where a
    line lacks it), labels as lists (a column has one type)."""
    objs = [json.loads(lines[n - 1]) for n in numbers]
    for obj in objs:
        reqs = obj.get("requirements") or [obj["requirement"]]
        if isinstance(obj.get("label"), bool):
            obj["label"] = [obj["label"]] * len(reqs)
        obj["messages"] = [dict({"reasoning_content": None}, **m) for m in obj["messages"]]
    keys = sorted({k for obj in objs for k in obj})
    return [{k: obj.get(k) for k in keys} for obj in objs]


def test_parquet_input_gives_the_jsonl_records(ray_cluster, mixed, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    want = mixed["records"]
    lines = mixed["data"].read_text().splitlines()
    data = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pylist(_as_parquet_rows(lines, [r["line"] for r in want])),
                   data)
    out = tmp_path / "ray.parquet"
    result = _cli(data, "-o", out, "--pool", "ray", "--batch-size", 4)
    assert result.exit_code == 0, result.output
    journal = read_jsonl(tmp_path / "ray.parquet.jsonl")  # the resumable record log
    assert [r["line"] for r in journal] == list(range(1, len(want) + 1))  # row numbers
    assert_same_records([dict(g, line=w["line"]) for g, w in zip(journal, want, strict=True)],
                        want)
    # The Parquet output holds the same records; unlabelled rows have null labels/correct.
    table = [{k: v for k, v in r.items() if v is not None}
             for r in pq.read_table(out).to_pylist()]
    assert table == journal
    before = pq.read_table(out).to_pylist()
    again = _cli(data, "-o", out, "--pool", "ray")  # resumes from the journal: nothing to do
    assert again.exit_code == 0 and f"checked 0 lines, {len(want)} already done" in again.output
    assert pq.read_table(out).to_pylist() == before


def test_parquet_output_needs_engine_ray(tmp_path):
    data = write(tmp_path / "d.jsonl", mixed_lines(2)[0])
    result = _cli(data, "-o", tmp_path / "o.parquet", "--model", tmp_path / "never-loaded")
    assert result.exit_code == 1 and "--pool ray" in result.output, result.output
    assert not (tmp_path / "o.parquet").exists()


@pytest.fixture()
def no_ray_start(monkeypatch):
    def tripwire(*args, **kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr("mellea_local.batch.pipeline.ray_session", tripwire)


def _binary(p: Path) -> Path:
    (p / "x.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    return p / "x.jsonl"


def _wrong_columns(p: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"conversation": ["hi"], "requirement": ["a"]}), p / "c.parquet")
    return p / "c.parquet"


@pytest.mark.parametrize(("make", "words"), [
    (lambda p: p / "absent.jsonl", "does not exist"),
    (lambda p: write(p / "data.csv", ["id,messages", "1,hello"]), "is not JSONL"),
    (_binary, "not UTF-8"),
    (lambda p: write(p / "fake.parquet", ['{"messages": []}']), "not a readable Parquet"),
    (_wrong_columns, 'needs "messages"'),
])
def test_an_unreadable_input_is_one_error_line_before_ray_starts(tmp_path, no_ray_start,
                                                                 make, words):
    pytest.importorskip("ray.data", reason=INSTALL_HINT)
    result = _cli(make(tmp_path), "-o", tmp_path / "o.jsonl", "--pool", "ray",
                  "--actors", 2)
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize(("args", "words"), [
    (["--actors", "0"], "--actors 0"),
    (["--batch-size", "0"], "--batch-size 0"),
    (["--gpus-per-actor", "-1"], "--gpus-per-actor"),
    (["--ray-address", " "], "--ray-address"),
])
def test_bad_pool_flags_are_refused_before_anything_starts(tmp_path, no_ray_start, args,
                                                           words):
    data = write(tmp_path / "d.jsonl", mixed_lines(2)[0])
    result = _cli(data, "-o", tmp_path / "o.jsonl", "--pool", "ray", *args)
    assert result.exit_code == 1 and result.output.startswith("error: "), result.output
    assert words in result.output


def test_ray_flags_without_engine_ray_are_refused(tmp_path):
    data = write(tmp_path / "d.jsonl", mixed_lines(2)[0])
    result = _cli(data, "-o", tmp_path / "o.jsonl", "--actors", "2")
    assert result.exit_code == 1 and "--pool ray" in result.output, result.output
    assert not (tmp_path / "o.jsonl").exists()


def test_more_actors_than_the_cluster_holds_is_refused_not_a_hang(ray_cluster, tmp_path):
    from mellea_local.batch import RayOptions, run
    from mellea_local.errors import BatchOptionError

    data = write(tmp_path / "d.jsonl", mixed_lines(2)[0])
    with pytest.raises(BatchOptionError, match="--actors 3 needs 3 CPUs; the Ray cluster has 2"):
        run(data, tmp_path / "o.jsonl", options=RayOptions(actors=3))
    with pytest.raises(BatchOptionError, match="GPUs"):
        run(data, tmp_path / "o.jsonl", options=RayOptions(gpus_per_actor=1))


def test_without_ray_the_error_names_the_extra(tmp_path, monkeypatch):
    import sys

    from mellea_local.batch import run
    from mellea_local.errors import RayNotInstalledError

    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` sees when absent
    with pytest.raises(RayNotInstalledError, match=r"pip install 'mellea-local\[ray\]'"):
        run(tmp_path / "d.jsonl", tmp_path / "o.jsonl")
    data = write(tmp_path / "d.jsonl", mixed_lines(2)[0])
    result = _cli(data, "-o", tmp_path / "o.jsonl", "--pool", "ray")
    assert result.exit_code == 1 and "mellea-local[ray]" in result.output


def test_the_package_imports_without_ray():
    import subprocess
    import sys

    code = ("import sys; sys.modules['ray'] = None; import mellea_local.batch, "
            "mellea_local.cli; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.stdout.strip() == "ok", proc.stderr


@pytest.mark.slow
def test_two_sigkills_in_a_2000_line_run_lose_and_duplicate_nothing(ray_cluster, tmp_path):
    """The issue's target: 2,000 lines, 2 actors, two actor processes SIGKILLed mid-run."""
    from mellea_local.batch import BatchEvent, RayOptions, run

    lines = [json.dumps({"id": i, "messages": [{"role": "user", "content": f"Name a city {i}"},
                                               {"role": "assistant",
                                                "content": "paris" if i % 3 else "rome"}],
                         "requirements": ["Mention paris."]}) for i in range(1, 2001)]
    data = write(tmp_path / "data.jsonl", lines)
    killed: list[int] = []
    last: list[BatchEvent] = []

    def kill_twice(event: BatchEvent) -> None:
        last[:] = [event]
        due = len(killed) < 2 and event.done >= (0.2, 0.55)[len(killed)] * event.total
        alive = sorted(event.pids - set(killed))
        if due and alive:
            pid = alive[-1]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    out = tmp_path / "ray.jsonl"
    summary = run(data, out, options=RayOptions(actors=2, batch_size=8),
                  observer=kill_twice)
    numbers = [r["line"] for r in read_jsonl(out)]
    assert len(killed) == 2
    assert numbers == list(range(1, 2001))  # 0 lost, 0 duplicated, in input order
    assert summary.checked == 2000 and not summary.errors
    local = tmp_path / "local.jsonl"
    assert _cli(data, "-o", local).exit_code == 0
    assert_same_records(read_jsonl(out), read_jsonl(local))
