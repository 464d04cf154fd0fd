"""The README's first Python example runs as written, offline, in a fresh process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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
