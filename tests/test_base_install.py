"""A base install (no extras) imports the whole public API; a feature that needs an extra
raises ``MissingExtraError`` with the install line when it is used.

The dev venv has every extra, so each case runs in a fresh interpreter whose meta-path finder
refuses the extra's modules: the same ``ModuleNotFoundError`` a base install gives. CI also
builds a real base-only venv (``.ci/run``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BLOCK = textwrap.dedent("""
    import sys
    BLOCKED = {blocked!r}

    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Refuse())
""")


def run_blocked(blocked: set[str], code: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = BLOCK.format(blocked=sorted(blocked)) + textwrap.dedent(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, env=env, timeout=300, cwd=ROOT)


def test_the_public_api_imports_without_any_extra():
    done = run_blocked({"httpx", "gguf", "ray", "matplotlib", "if_verifiable", "langdetect"}, """
        import json
        import mellea_local
        namespace = {}
        exec("from mellea_local import *", namespace)
        values = [getattr(mellea_local, n) for n in mellea_local.__all__]
        print(json.dumps({"star": sorted(set(mellea_local.__all__) - set(namespace)),
                          "dir": sorted(set(mellea_local.__all__) - set(dir(mellea_local))),
                          "count": len(values),
                          "loaded": sorted(m for m in ("httpx", "ray", "gguf", "matplotlib",
                                                        "if_verifiable", "langdetect")
                                           if m in sys.modules)}))
    """)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["star"] == [] and seen["dir"] == [] and seen["loaded"] == []
    assert seen["count"] == len(__import__("mellea_local").__all__)


def test_using_llama_server_backend_without_the_extra_names_it():
    done = run_blocked({"httpx"}, """
        from mellea_local import LlamaServerBackend, MelleaLocalError, MissingExtraError
        for use in (lambda: LlamaServerBackend("http://127.0.0.1:1"),
                    lambda: LlamaServerBackend.launch("folder")):
            try:
                use()
            except MissingExtraError as exc:
                assert isinstance(exc, ImportError) and isinstance(exc, MelleaLocalError)
                print(exc.extra, "|", exc)
        assert not isinstance(object(), LlamaServerBackend)
    """)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("llamacpp |")
        assert "pip install 'mellea-local[llamacpp]'" in line and "httpx" in line
    assert "LlamaServerBackend.launch needs" in lines[1]


def test_routing_without_the_verify_extra_says_so_once_and_keeps_only_our_rules():
    done = run_blocked({"if_verifiable", "langdetect"}, """
        import logging, json
        records = []
        class Keep(logging.Handler):
            def emit(self, record):
                records.append(record.getMessage())
        logging.getLogger("mellea_local").addHandler(Keep())
        from mellea_local.requirements import verify
        mapped = verify.map_requirement("Keep it under 50 words.")
        routed = [verify.route("Keep it under 50 words."), verify.route("No commas.")]
        ours = verify.route("End with a question.")  # our rules need no extra
        print(json.dumps({"mapped": str(mapped), "routed": [str(r) for r in routed],
                          "ours": str(ours), "verdict": verify.verify(ours, "Is it?"),
                          "warnings": records}))
    """)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["mapped"] == ("length_constraints:number_words(num_words=50, "
                              "relation='less than')")
    assert seen["routed"] == ["None", "None"]
    assert seen["ours"] == "rule:ends_with_question()" and seen["verdict"] is True
    assert len(seen["warnings"]) == 1 and 'mellea-local[verify]' in seen["warnings"][0]


def test_an_unrelated_import_failure_is_not_passed_off_as_a_missing_extra():
    # A broken install (torch gone) must surface as itself, not as "install the extra".
    done = run_blocked({"torch"}, """
        import mellea_local
        try:
            mellea_local.LlamaServerBackend
        except ModuleNotFoundError as exc:
            print(type(exc).__name__, exc.name)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ModuleNotFoundError", "torch"]


@pytest.mark.parametrize(("blocked", "argv", "extra"), [
    ({"ray"}, ["check", "{data}", "-o", "{out}", "--engine", "ray"], "ray"),
    ({"gguf"}, ["export-gguf", "embedded", "{out}"], "llamacpp"),
])
def test_cli_commands_that_need_an_extra_say_which(tmp_path, blocked, argv, extra):
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "Hi"},
                                             {"role": "assistant", "content": "Hello."}],
                                "requirement": "Be brief."}) + "\n")
    args = [a.format(data=data, out=tmp_path / "out") for a in argv]
    done = run_blocked(blocked, """
        from mellea_local.cli import app
        app(sys.argv[1:], standalone_mode=True)
    """, *args)
    assert done.returncode == 1
    assert f"pip install 'mellea-local[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_plots_without_matplotlib_raise_missing_extra(tmp_path):
    done = run_blocked({"matplotlib"}, f"""
        from mellea_local.bench.plots import plot_latency
        from mellea_local.errors import MissingExtraError
        rows = [{{"context_tokens": 128, "median_ms": {{"ours": 1.0}}}}]
        try:
            plot_latency({{"rows": rows}}, {str(tmp_path / "x.png")!r})
        except MissingExtraError as exc:
            print(exc.extra, exc)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("plots ") and "pip install 'mellea-local[plots]'" in done.stdout
    assert not (tmp_path / "x.png").exists()
