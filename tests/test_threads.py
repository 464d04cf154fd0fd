"""torch's CPU thread count, chosen on purpose (mellea_local/threads.py): the choice from the
usable CPUs and the load, a caller's own count kept, the warning in the known-slow case, the
``--threads`` flag on every model-running command, and the count in reports.

What touches torch's process-wide count runs in a fresh interpreter (no OMP_NUM_THREADS, which
the test run sets), with the affinity and load average replaced by fakes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mellea_local.cli import app
from mellea_local.errors import InvalidInputError, ThreadCountError
from mellea_local.threads import (
    check_threads,
    default_threads,
    known_slow,
    load_average,
    usable_cpus,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("cpus", "load", "expected"), [
    (2, 0.0, 2),      # idle: every usable CPU, as torch would choose
    (2, 0.44, 2),     # under half a CPU of other work is noise
    (2, 0.7, 1),      # the shared 2-core machine of the measurement: one thread
    (2, 1.3, 1),
    (2, 40.0, 1),     # never fewer than one
    (16, 3.2, 13),
    (1, 0.0, 1),
    (4, float("nan"), 4),   # an unreadable load is no load
    (4, -1.0, 4),
])
def test_default_is_usable_cpus_less_the_load(cpus, load, expected):
    assert default_threads(cpus, load) == expected


def test_default_never_lands_in_the_known_slow_case():
    for cpus in (1, 2, 3, 8, 64):
        for tenth in range(0, 200):
            load = tenth / 10
            assert not known_slow(default_threads(cpus, load), cpus, load), (cpus, load)


def test_known_slow_is_several_threads_on_too_few_free_cpus():
    assert known_slow(2, 2, 1.3)        # the measured case: 2 threads, a busy 2-core box
    assert not known_slow(2, 2, 0.2)
    assert not known_slow(1, 2, 9.0)    # one thread shares a core, it does not spin on it
    assert not known_slow(8, 2, None)   # no load average: nothing known


def test_usable_cpus_and_load_come_from_affinity_and_loadavg(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 9.0, 9.0))
    assert usable_cpus() == 3
    assert load_average() == 1.5
    assert default_threads() == 2

    def no_loadavg():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", no_loadavg)
    assert load_average() is None and default_threads() == 3


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2", None])
def test_a_bad_count_is_refused_by_name(bad):
    with pytest.raises(InvalidInputError, match="--threads"):
        check_threads(bad)


FAKE = textwrap.dedent("""
    import json, logging, os, sys
    os.sched_getaffinity = lambda pid: set(range({cpus}))
    os.getloadavg = lambda: ({load}, 0.0, 0.0)
    logging.basicConfig(format="LOG %(message)s")
""")


def run_fake(code: str, *, cpus: int, load: float, args: tuple[str, ...] = ()) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",
                                                            "MKL_NUM_THREADS")}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    script = FAKE.format(cpus=cpus, load=load) + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, env=env, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["stderr"] = done.stderr
    return out


def test_backend_on_cpu_applies_the_default():
    seen = run_fake("""
        import torch
        from mellea_local import LocalHFBackend
        LocalHFBackend.embedded()
        print(json.dumps({"threads": torch.get_num_threads()}))
    """, cpus=3, load=0.9)
    assert seen["threads"] == 2  # 3 usable CPUs, about one busy
    assert "LOG" not in seen["stderr"]


def test_backend_keeps_a_count_the_caller_set():
    seen = run_fake("""
        import torch
        # A count no default would give: not per core (logical or physical), not the 4 usable.
        chosen = max(os.cpu_count(), 4) + 3
        torch.set_num_threads(chosen)
        from mellea_local import LocalHFBackend
        from mellea_local.threads import current_choice
        LocalHFBackend.embedded()
        print(json.dumps({"kept": torch.get_num_threads() == chosen,
                          "source": current_choice().source}))
    """, cpus=4, load=0.0)
    assert seen["kept"] and seen["source"] == "caller"


def test_an_environment_count_is_kept():
    seen = run_fake("""
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch
        from mellea_local.threads import apply_threads
        choice = apply_threads()
        print(json.dumps({"threads": torch.get_num_threads(), "source": choice.source}))
    """, cpus=4, load=0.0)
    assert seen["threads"] == 1 and seen["source"] == "caller"


def test_a_slow_count_warns_once_in_one_line():
    seen = run_fake("""
        import torch
        from mellea_local.threads import apply_threads
        first = apply_threads(2)
        apply_threads(2)
        print(json.dumps({"threads": torch.get_num_threads(), **first.as_dict()}))
    """, cpus=2, load=1.6)
    assert seen["threads"] == 2 and seen["threads_source"] == "flag"
    assert seen["usable_cpus"] == 2 and seen["load_average"] == 1.6
    warned = [line for line in seen["stderr"].splitlines() if line.startswith("LOG")]
    assert len(warned) == 1
    assert "2 torch threads on 2 usable CPU(s) with load average 1.6" in warned[0]
    assert "--threads 1" in warned[0]


def test_the_check_command_honours_threads(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "Hi"},
                                             {"role": "assistant", "content": "Hello."}],
                                "requirement": "Be brief."}) + "\n")
    seen = run_fake("""
        import torch
        from mellea_local.cli import app
        app(sys.argv[1:], standalone_mode=False)
        print(json.dumps({"threads": torch.get_num_threads()}))
    """, cpus=4, load=0.0, args=("check", str(data), "-o", str(tmp_path / "out.jsonl"),
                                 "--threads", "3"))
    assert seen["threads"] == 3
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize("command", ["demo", "check", "chat", "react", "bench"])
def test_every_model_running_command_takes_threads(command):
    runner = CliRunner()
    shown = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0
    assert "--threads" in shown.output and "load average" in shown.output
    refused = runner.invoke(app, [command, "--threads", "0"])
    assert refused.exit_code == 2 and "--threads" in refused.output


def test_a_backend_around_a_loaded_model_applies_it_too():
    seen = run_fake("""
        import torch
        from mellea_local import LocalHFBackend
        from mellea_local.embedded import build_model, build_tokenizer
        tokenizer = build_tokenizer()
        LocalHFBackend.from_loaded(build_model(tokenizer, seed=1), tokenizer)
        print(json.dumps({"threads": torch.get_num_threads()}))
    """, cpus=4, load=2.2)
    assert seen["threads"] == 2


def test_threads_reach_each_ray_actor():
    from mellea_local.cli import ray_options

    assert ray_options("ray", 2, None, None, None, 3).threads == 3
    assert ray_options("ray", 2, None, None, None).threads == 1  # one per actor by default
    assert ray_options("local", None, None, None, None, 3) is None


def test_more_threads_than_usable_cpus_is_refused_with_the_reason():
    with pytest.raises(ThreadCountError, match=r"--threads 10000: this process may use 2 CPU"):
        check_threads(10000, cpus=2)
    assert check_threads(2, cpus=2) == 2
    with pytest.raises(ThreadCountError, match=f"may use {usable_cpus()} CPU"):
        check_threads(usable_cpus() + 1)


def _thread_commands() -> dict[str, list[str]]:
    """Every command of the CLI (sub-commands included) that takes --threads, by its path."""
    import typer

    found: dict[str, list[str]] = {}

    def walk(command, path: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        if any("--threads" in getattr(p, "opts", ()) for p in command.params):
            found[" ".join(path)] = path

    walk(typer.main.get_command(app), [])
    return found


def test_the_commands_that_take_threads_are_the_ones_checked_below():
    assert set(_thread_commands()) == set(THREAD_COMMANDS)


THREAD_COMMANDS = ["demo", "check", "chat", "react", "bench", "train"]


@pytest.mark.parametrize("command", THREAD_COMMANDS)
def test_threads_10000_is_refused_before_any_thread_is_created(command, tmp_path, monkeypatch):
    import threading

    import torch

    def tripwire(*args, **kwargs):
        raise AssertionError("a thread count reached torch")

    monkeypatch.setattr(torch, "set_num_threads", tripwire)
    monkeypatch.setattr("mellea_local.backends.loading.load_pretrained", tripwire)
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "Hi"},
                                             {"role": "assistant", "content": "Hello."}],
                                "requirement": "Be brief.", "label": True}) + "\n")
    extra = {"check": [str(data), "-o", str(tmp_path / "o.jsonl")], "train": [str(data)],
             "react": ["What is 2 + 2?"]}.get(command, [])
    before = threading.active_count()
    result = CliRunner().invoke(app, [command, *extra, "--threads", "10000"])
    assert result.exit_code == 2, result.output
    assert "--threads 10000: this process may use" in " ".join(result.output.split())
    assert threading.active_count() == before


def test_apply_threads_and_train_config_refuse_before_torch_is_told(monkeypatch):
    import torch

    from mellea_local.threads import apply_threads
    from mellea_local.training import TrainConfig

    monkeypatch.setattr(torch, "set_num_threads",
                        lambda n: pytest.fail("a thread count reached torch"))
    with pytest.raises(ThreadCountError):
        apply_threads(10000)
    with pytest.raises(ThreadCountError):
        TrainConfig(data="unused.jsonl", threads=10000).check()
