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
