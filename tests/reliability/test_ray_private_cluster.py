"""The private Ray cluster of ``check --engine ray``: bounded connection, a private token,
nothing left behind when the driver is SIGKILLed.

The SIGKILL test starts a real private Ray (~20 s of CPU on a small machine) in a child
driver, kills the driver with SIGKILL and waits for every process Ray started (GCS, raylet,
DashboardAgent, RuntimeEnvAgent, workers) to end.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from mellea_local.batch.pipeline import RayOptions, probe_address, ray_session, secure_token_file
from mellea_local.errors import BatchOptionError

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import json, os, time
from mellea_local.batch import watchdog
from mellea_local.batch.pipeline import RayOptions, ray_session
with ray_session(RayOptions()) as ray:
    ray.get(ray.remote(lambda: 1).remote())
    me = (os.getpid(), watchdog._stat(os.getpid())[1])
    names = {}
    for pid, _ in watchdog._descendants({me}):
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
        if pid != os.getpid() and "watchdog.py" not in cmd:
            names[pid] = cmd[:80]
    print(json.dumps(names), flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1", "localhost:1"])
def test_an_address_nothing_answers_is_refused_in_seconds(address):
    started = time.monotonic()
    with pytest.raises(BatchOptionError) as caught, ray_session(RayOptions(address=address)):
        pass
    assert time.monotonic() - started < 30
    assert address in str(caught.value) and "ray start --head" in str(caught.value)


@pytest.mark.parametrize("address", ["127.0.0.1:x", "127.0.0.1:0", "127.0.0.1:70000"])
def test_an_address_with_a_bad_port_names_it(address):
    with pytest.raises(BatchOptionError, match="port"):
        probe_address(address)


def test_the_token_file_is_written_owner_only(tmp_path, monkeypatch):
    path = tmp_path / "ray" / "auth_token"
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))
    secure_token_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text()) == 64  # Ray's own format: 32 random bytes as hex
    token = path.read_text()
    secure_token_file()  # an existing token is kept
    assert path.read_text() == token


def test_a_world_readable_token_file_is_narrowed(tmp_path, monkeypatch):
    path = tmp_path / "auth_token"
    path.write_text("a" * 64)
    path.chmod(0o644)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))
    secure_token_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "a" * 64


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the watchdog needs /proc")
def test_a_sigkilled_driver_leaves_no_ray_process_behind(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               RAY_AUTH_TOKEN_PATH=str(tmp_path / "auth_token"))
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env, cwd=tmp_path)
    try:
        line = driver.stdout.readline()  # blocks until Ray runs (bounded by pytest-timeout)
        ray_pids = [int(p) for p in json.loads(line)]
        names = " ".join(json.loads(line).values())
        assert "raylet" in names and ray_pids
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 60
        left = ray_pids
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = [p for p in ray_pids if Path(f"/proc/{p}").exists()
                    and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z"]
        assert not left, f"left running after the driver died: {left}"
    finally:
        if driver.poll() is None:
            driver.kill()


NOT_RAY = """
import socket, sys, threading
from mellea_local.batch import pipeline
from mellea_local.errors import BatchOptionError
pipeline.JOIN_TIMEOUT_S = 3.0
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(50)
held = []
threading.Thread(target=lambda: [held.append(server.accept()[0]) for _ in range(50)],
                 daemon=True).start()
address = f"127.0.0.1:{server.getsockname()[1]}"
try:
    with pipeline.ray_session(pipeline.RayOptions(address=address)):
        pass
except BatchOptionError as exc:
    print("REFUSED", address in str(exc), "no Ray cluster answered" in str(exc))
"""


def test_a_port_that_is_no_ray_cluster_is_refused_within_the_deadline():
    """A server that accepts connections and says nothing: Ray's client waited forever. Run in
    a child process, which must also exit although Ray's connecting thread is abandoned."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", NOT_RAY], capture_output=True, text=True,
                          env=env, timeout=120)
    assert "REFUSED True True" in done.stdout, done.stdout + done.stderr[-2000:]
