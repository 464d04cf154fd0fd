"""`check --pool local` vs `--pool ray` with 1 and 2 actors, on the embedded model.

Per round (rounds interleave the modes, so drift hits all alike): the local engine in this
process (``local``: torch's default threads, what ``check`` runs with; ``local1``: one thread,
what each CPU actor gets), then a fresh Ray (``ray.init`` timed: Ray's fixed start-up
cost), a 1-actor run and a 2-actor run over the same dataset, then ``ray.shutdown``. For every
run:

- ``rows_per_s``: lines / wall time of the run (start-up included: what a user waits for);
- ``steady_rows_per_s``: lines after every actor has returned its first batch / time after
  that (the pool's throughput once all its models are loaded; local: rows / check time);
- ``first_batch_s``: time to the first record (actor start + model load + one batch).

Because these machines share their cores, also two load-independent figures per Ray run:
rows per actor CPU-second in the steady part (equal for 1 and 2 actors = no per-actor
overhead from the pool, so throughput scales with the cores that are free) and the driver's
CPU-ms per row. Also the RSS of each actor process (sampled at the run's last batch), of
the Ray daemons just after ``ray.init``, and a check that every mode wrote the same records
(scores within 1e-6). Medians over the rounds; ratios ray2/ray1 (target >= 1.6 on 2 cores)
and ray/local.

Usage: python benchmarks/batch.py [--lines 400] [--rounds 3] [--batch-size 8]
Writes benchmarks/results/batch.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
DEFAULT_THREADS = __import__("torch").get_num_threads()  # what `check` runs with
DAEMONS = ("raylet", "gcs_server", "dashboard", "log_monitor", "monitor.py", "runtime_env",
           "ray::IDLE")


def dataset(path: Path, n: int) -> Path:
    rows = []
    for i in range(1, n + 1):
        turns = [{"role": "user", "content": f"Name a big city, please ({i})."},
                 {"role": "assistant", "content": ("paris is a big old city" if i % 2
                                                   else "rome has many bridges")}]
        rows.append(json.dumps({"id": i, "messages": turns, "label": bool(i % 2),
                                "requirements": ["Mention paris.", "Answer briefly."]}))
    path.write_text("\n".join(rows) + "\n")
    return path


def cpu_s(pids: set[int]) -> float:
    """User + system CPU seconds the processes have used so far."""
    import psutil

    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


def rss_mb(pids: set[int]) -> list[float]:
    import psutil

    out = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            out.append(psutil.Process(pid).memory_info().rss / 2**20)
    return out


def daemons_mb() -> float:
    import psutil

    total = 0.0
    for proc in psutil.process_iter(["cmdline", "name", "memory_info"]):
        text = " ".join(proc.info["cmdline"] or []) + " " + (proc.info["name"] or "")
        if proc.pid != os.getpid() and any(d in text for d in DAEMONS) and "ray" in text:
            total += proc.info["memory_info"].rss / 2**20
    return total


def run_local(data: Path, out: Path, threads: int | None) -> dict[str, Any]:
    import torch
    from rich.console import Console

    from mellea_local.batch.local import load_check_backend, run_check

    torch.set_num_threads(threads or DEFAULT_THREADS)
    t0 = time.perf_counter()
    backend, name = load_check_backend("embedded")
    t1 = time.perf_counter()
    summary = run_check(data, out, backend, adapter=name, console=Console(stderr=True,
                                                                         quiet=True))
    t2 = time.perf_counter()
    del backend
    return {"rows_per_s": summary.checked / (t2 - t0), "steady_rows_per_s":
            summary.checked / (t2 - t1), "first_batch_s": t1 - t0,
            "threads": torch.get_num_threads()}


def run_ray(data: Path, out: Path, actors: int, batch_size: int) -> dict[str, Any]:
    from rich.console import Console

    from mellea_local.batch import BatchEvent, RayOptions, run

    marks: list[tuple[float, int, int]] = []  # (time, rows done, actors seen)
    rss: list[float] = []
    cpu: list[float] = []  # actors' CPU seconds at the first full-pool mark and at the end

    def observe(event: BatchEvent) -> None:
        marks.append((time.perf_counter(), event.done, len(event.pids)))
        if len(event.pids) >= actors and not cpu:
            cpu.append(cpu_s(event.pids))
        if event.done == event.total:
            rss.extend(rss_mb(event.pids))
            cpu.append(cpu_s(event.pids))

    driver0 = time.process_time()
    t0 = time.perf_counter()
    summary = run(data, out, options=RayOptions(actors=actors, batch_size=batch_size),
                  console=Console(stderr=True, quiet=True), observer=observe)
    t2 = time.perf_counter()
    # Steady state: from the moment every actor has returned a batch (all models loaded).
    t1, first, _ = next((m for m in marks if m[2] >= actors), marks[0])
    steady_rows = summary.checked - first
    return {"rows_per_s": summary.checked / (t2 - t0),
            "steady_rows_per_s": steady_rows / (marks[-1][0] - t1),
            "first_batch_s": marks[0][0] - t0, "actor_rss_mb": rss,
            # Load-independent: rows per actor CPU-second in the steady part, and the
            # driver's own CPU per row (reading results, writing records).
            "rows_per_actor_cpu_s": steady_rows / max(cpu[-1] - cpu[0], 1e-9),
            "driver_cpu_ms_per_row": 1000 * (time.process_time() - driver0) / summary.checked}


def same_records(a: Path, b: Path) -> float:
    """Largest score difference between two outputs; raises if any other field differs."""
    ra = [json.loads(x) for x in a.read_text().splitlines()]
    rb = [json.loads(x) for x in b.read_text().splitlines()]
    assert [r["line"] for r in ra] == [r["line"] for r in rb]
    worst = 0.0
    for x, y in zip(ra, rb, strict=True):
        assert {k: v for k, v in x.items() if k != "scores"} == \
            {k: v for k, v in y.items() if k != "scores"}
        worst = max(worst, *(abs(p - q) for p, q in zip(x["scores"], y["scores"], strict=True)))
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", type=Path, default=RESULTS / "batch.json")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ray

    from mellea_local.bench.timing import machine_info

    runs: dict[str, list[dict[str, Any]]] = {"local": [], "local1": [], "ray1": [],
                                             "ray2": []}
    init_s, daemon_mb, diffs = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = dataset(root / "data.jsonl", args.lines)
        for r in range(args.rounds):
            outs = {m: root / f"{m}-{r}.jsonl" for m in runs}
            runs["local"].append(run_local(data, outs["local"], None))
            runs["local1"].append(run_local(data, outs["local1"], 1))
            t0 = time.perf_counter()
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            init_s.append(time.perf_counter() - t0)
            daemon_mb.append(daemons_mb())
            try:
                for m, n in (("ray1", 1), ("ray2", 2)):
                    runs[m].append(run_ray(data, outs[m], n, args.batch_size))
            finally:
                ray.shutdown()
            diffs += [same_records(outs["local"], outs[m]) for m in ("local1", "ray1", "ray2")]
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{m} {runs[m][-1]['steady_rows_per_s']:.1f} rows/s" for m in runs), flush=True)

    def med(mode: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[mode])

    summary = {m: {k: med(m, k) for k in ("rows_per_s", "steady_rows_per_s",
                                           "first_batch_s")} for m in runs}
    for m in ("ray1", "ray2"):
        summary[m]["actor_rss_mb"] = statistics.median(
            v for x in runs[m] for v in x["actor_rss_mb"])
        for k in ("rows_per_actor_cpu_s", "driver_cpu_ms_per_row"):
            summary[m][k] = med(m, k)
    result = {
        "benchmark": "batch", "model": "embedded", **machine_info(),
        "lines": args.lines, "requirements_per_line": 2, "batch_size": args.batch_size,
        "rounds": args.rounds, "runs": runs, "median": summary,
        "ray_init_s": statistics.median(init_s), "ray_daemons_rss_mb":
            statistics.median(daemon_mb), "max_score_diff_vs_local": max(diffs),
        "ratios": {
            "ray2_over_ray1_steady": summary["ray2"]["steady_rows_per_s"]
            / summary["ray1"]["steady_rows_per_s"],
            "ray2_over_ray1_end_to_end": summary["ray2"]["rows_per_s"]
            / summary["ray1"]["rows_per_s"],
            "ray2_over_ray1_per_cpu_s": summary["ray2"]["rows_per_actor_cpu_s"]
            / summary["ray1"]["rows_per_actor_cpu_s"],
            "ray1_over_local1_steady": summary["ray1"]["steady_rows_per_s"]
            / summary["local1"]["steady_rows_per_s"],
            "ray1_over_local_steady": summary["ray1"]["steady_rows_per_s"]
            / summary["local"]["steady_rows_per_s"],
            "ray2_over_local_steady": summary["ray2"]["steady_rows_per_s"]
            / summary["local"]["steady_rows_per_s"],
            "ray2_over_local_end_to_end": summary["ray2"]["rows_per_s"]
            / summary["local"]["rows_per_s"],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'mode':<6} {'rows/s':>8} {'steady':>8} {'first s':>8} {'actor MB':>9}")
    for m, s in summary.items():
        print(f"{m:<6} {s['rows_per_s']:8.1f} {s['steady_rows_per_s']:8.1f} "
              f"{s['first_batch_s']:8.2f} {s.get('actor_rss_mb', float('nan')):9.0f}")
    for m in ("ray1", "ray2"):
        print(f"{m}: {summary[m]['rows_per_actor_cpu_s']:.1f} rows per actor CPU-second, "
              f"driver {summary[m]['driver_cpu_ms_per_row']:.2f} CPU-ms per row")
    print(f"ray.init {result['ray_init_s']:.2f} s, Ray daemons {result['ray_daemons_rss_mb']:.0f}"
          f" MB RSS, max |score diff| vs local {result['max_score_diff_vs_local']:.1e}")
    for k, v in result["ratios"].items():
        print(f"{k:<28} {v:.2f}" + ("  (target >= 1.6)" if k == "ray2_over_ray1_steady"
                                     else ""))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
