"""Generation workers are tracked, and the process never exits while one is inside torch.

A daemon worker still inside a torch op when Python finalizes aborts the whole process
(``terminate called without an active exception``, exit 134): ``mellea-local react`` did so in
3 of 33 runs after printing its answer. The subprocess test exits while a worker is generating,
the worst case, which aborted on every run before the exit hook existed.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.backends.workers import join_workers, live_workers
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model
from mellea_local.messages import Message
from mellea_local.options import ModelOption

LONG = {ModelOption.STREAM: True, ModelOption.MAX_NEW_TOKENS: 3000, "min_new_tokens": 3000}


@pytest.fixture(scope="module")
def backend(tiny_tokenizer):
    return LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=2), tiny_tokenizer,
                                      model_id="tiny-llama")


async def test_a_finished_generation_leaves_no_worker(backend):
    mot, _ = await backend.generate_from_context(
        Message("user", "hi"), ChatContext(), model_options={ModelOption.MAX_NEW_TOKENS: 3})
    await mot.avalue()
    assert join_workers(timeout=30)
    assert live_workers() == []


async def test_join_with_cancel_stops_a_running_generation(backend):
    mot, _ = await backend.generate_from_context(Message("user", "go on"), ChatContext(),
                                                 model_options=LONG)
    await mot.astream()  # the worker is inside generate()
    assert [t.name for t in live_workers()] == ["mellea-local-generate"]
    assert await asyncio.to_thread(join_workers, 30, cancel=True)
    assert live_workers() == []
    # Stopped by the cancel event at the next token, far from 3000 tokens, and the
    # backend is usable afterwards.
    await mot.avalue()
    assert mot.usage["completion_tokens"] < 3000
    again, _ = await backend.generate_from_context(
        Message("user", "hi"), ChatContext(), model_options={ModelOption.MAX_NEW_TOKENS: 2})
    assert isinstance(await again.avalue(), str)


EXIT_MID_GENERATION = textwrap.dedent("""
    import asyncio, sys
    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.backends.workers import live_workers
    from mellea_local.core.context import ChatContext
    from mellea_local.messages import Message
    from mellea_local.options import ModelOption

    backend = LocalHFBackend(sys.argv[1])

    async def main():
        mot, _ = await backend.generate_from_context(
            Message("user", "go on"), ChatContext(),
            model_options={ModelOption.STREAM: True, ModelOption.MAX_NEW_TOKENS: 3000,
                           "min_new_tokens": 3000})
        await mot.astream()
        return mot

    mot = asyncio.run(main())
    print("workers at exit:", len(live_workers()), flush=True)
""")


def test_exiting_while_a_worker_generates_is_a_clean_exit(tiny_model_dir):
    done = subprocess.run([sys.executable, "-c", EXIT_MID_GENERATION, str(tiny_model_dir)],
                          capture_output=True, text=True, timeout=300)
    assert "workers at exit: 1" in done.stdout, done.stdout + done.stderr
    assert "terminate called" not in done.stderr
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_finished_worker_serves_the_next_call():
    """Threads are reused (a fresh one per generation ran ~8 % slower); a raising target
    neither kills the pool nor stays registered."""
    import threading

    from mellea_local.backends.workers import start_worker

    seen: list[threading.Thread] = []

    def run(fail: bool) -> None:
        seen.append(threading.current_thread())
        if fail:
            raise RuntimeError("a target that fails")

    for fail in (False, True, False):
        start_worker(lambda fail=fail: run(fail), threading.Event(), name="mellea-local-test")
        assert join_workers(timeout=30)
        assert live_workers() == []
    assert len(seen) == 3 and len(set(seen)) == 1 and seen[0].daemon
