"""The README's first Python example runs as written, offline, in a fresh process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_first_python_example_runs_offline(tmp_path):
    code = re.search(r"```python\n(.*?)```", README.read_text("utf-8"), re.S).group(1)
    assert "LocalHFBackend.embedded()" in code
    # The user's shell: HF_HUB_OFFLINE unset. The example must not need the network at all.
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE",
                                                            "TRANSFORMERS_OFFLINE")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("answer: "), done.stdout
    assert "CacheStats(" in done.stdout
    assert done.stderr.strip() == "", done.stderr


def _embedded_model_table() -> list[tuple[str, str]]:
    """The (prompt, answer) rows of the README's "What it does well" table."""
    text = README.read_text("utf-8")
    table = text[text.index("What it does well"):text.index("What it cannot do")]
    return re.findall(r"^\| `([^`]+)` \| `([^`]+)`", table, re.M)


def test_the_embedded_models_advertised_answers_are_what_it_says(shared_embedded_backend):
    """Every chat prompt the README shows, greedy, gives the answer the README prints."""
    import asyncio

    from mellea_local.core.context import ChatContext
    from mellea_local.messages import Message

    rows = [(p, a) for p, a in _embedded_model_table() if not p.startswith("mellea-local")]
    assert len(rows) >= 4

    async def answer(prompt: str) -> str:
        mot, _ = await shared_embedded_backend.generate_from_context(Message("user", prompt),
                                                                     ChatContext())
        return await mot.avalue()

    for prompt, expected in rows:
        assert asyncio.run(answer(prompt)) == expected, prompt


# --- Every documented install route bounds the llama.cpp build -------------------------------

SCRIPT = README.parent / "scripts" / "install_llamacpp.sh"


def _script_x86_cmake_args() -> list[str]:
    text = SCRIPT.read_text()
    portable = re.search(r'portable="(-DGGML_NATIVE=OFF[^"]*)"', text).group(1)
    default = re.search(r'CMAKE_ARGS:-(-DLLAMA_BUILD_TESTS[^$]*)\$\{portable\}', text).group(1)
    return (default + portable).split()


def test_the_script_bounds_the_build_it_runs():
    text = SCRIPT.read_text()
    assert 'LLAMA_CPP_BUILD_JOBS="$jobs"' in text  # the sdist's -j bound, set for pip wheel
    assert "GGML_NATIVE=OFF" in text and "GGML_AMX_TILE=OFF" in text


def test_every_readme_pip_route_to_the_llamacpp_extra_bounds_the_build():
    text = README.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    routes = [b for b in blocks if "[llamacpp]" in b and "pip install" in b]
    assert routes, "the README documents a pip route to the llamacpp extra"
    for block in routes:
        command = block.replace("\\\n", " ")
        assert "LLAMA_CPP_BUILD_JOBS=" in command, block
        args = re.search(r'CMAKE_ARGS="([^"]*)"', command).group(1).split()
        assert args == _script_x86_cmake_args()  # the README's flags are the script's
    # Inline mentions of the pip route point at the bounded ways to run it.
    section = text.split("**Installing the `llamacpp` extra.**", 1)[1].split("\n## ", 1)[0]
    assert "scripts/install_llamacpp.sh" in section and "LLAMA_JOBS=N" in section


def test_the_missing_extra_message_gives_a_bounded_install_line():
    pytest.importorskip("httpx")  # launch.py is the llamacpp extra's
    from mellea_local.backends.llama_server.launch import INSTALL_HINT
    from mellea_local.extras import install_line

    for line in (install_line("llamacpp"), INSTALL_HINT):
        assert "LLAMA_CPP_BUILD_JOBS=" in line and "install_llamacpp.sh" in line
    assert install_line("ray") == "pip install 'mellea-local[ray]'"
