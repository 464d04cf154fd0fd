"""What a private Ray listens on, measured with ``ss -ltnp`` (issue 41).

Ray 2.60 binds its GCS, raylet and worker gRPC servers to 0.0.0.0 (hard-coded in Ray's
``GrpcServer``), so the private cluster of ``check --engine ray`` cannot be held to 127.0.0.1;
the README says so and what guards it. This test starts one (2 CPUs, ~20 s), lists every
listening socket of its processes and checks the guards: only Ray's own daemons listen (no
dashboard, no HTTP API), token authentication is on, the token file is owner-only, and Ray is
gone after the session. ``RAY_AUTH_MODE=disabled`` is refused before anything starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")


ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import json, os, subprocess
from mellea_local.batch import watchdog
from mellea_local.batch.pipeline import RayOptions, ray_session
from ray._private.authentication.authentication_utils import is_token_auth_enabled
with ray_session(RayOptions()) as ray:
    ray.get(ray.remote(lambda: 1).remote())
    me = (os.getpid(), watchdog._stat(os.getpid())[1])
    pids = {os.getpid()} | {pid for pid, _ in watchdog._descendants({me})}
    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    mine = [line.split() for line in lines.splitlines()
            if any(f"pid={p}," in line for p in pids)]
    print(json.dumps({"auth": bool(is_token_auth_enabled()),
                      "sockets": [[cols[3], cols[-1]] for cols in mine]}), flush=True)
"""

DAEMONS = ("gcs_server", "raylet", "ray::", "python", "ray_")


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_a_private_ray_listens_only_through_its_token_guarded_daemons(tmp_path):
    token = tmp_path / "auth_token"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               RAY_AUTH_TOKEN_PATH=str(token))
    env.pop("RAY_AUTH_MODE", None)
    env.pop("RAY_AUTH_TOKEN", None)
    done = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["auth"] is True  # every gRPC call needs the token
    assert oct(token.stat().st_mode & 0o777) == "0o600"
    sockets = found["sockets"]
    assert sockets, "Ray started no listening socket?"
    for address, owner in sockets:
        assert any(name in owner for name in DAEMONS), (address, owner)
        port = int(address.rsplit(":", 1)[1])
        assert port not in (8265, 52365, 10001), (address, owner)  # dashboard, agent, client
    # The measured fact the README states: these are not loopback-only.
    public = [a for a, _ in sockets if not a.startswith(("127.", "[::1]"))]
    print(f"{len(sockets)} listening sockets, {len(public)} beyond loopback: {sockets}")


REFUSED_SCRIPT = """
import ray
from mellea_local.batch.pipeline import RayOptions, ray_session
from mellea_local.errors import BatchOptionError
try:
    with ray_session(RayOptions()):
        print("started")
except BatchOptionError as exc:
    print("refused:", exc)
print("initialized:", ray.is_initialized())
"""


def test_a_private_ray_without_its_token_is_refused_before_it_starts():
    # In a process of its own: an earlier test of the suite may hold a Ray in this one, and
    # the rule is about starting a private cluster, which only a fresh process shows.
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    done = subprocess.run([sys.executable, "-c", REFUSED_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "RAY_AUTH_MODE=disabled" in done.stdout, done.stdout
    assert "Unset RAY_AUTH_MODE" in done.stdout
    assert "initialized: False" in done.stdout
