"""Run the peer library's (mellea 0.8) public unit tests against mellea_local.

The peer's test files are read from a checkout given by ``--peer`` (its repository root, the
folder holding ``test/``), copied into a temporary folder next to a conftest that installs
``tests/compat/peer_shim.py`` (every ``mellea.X`` import answered by our object of the same
name), and run with pytest. Nothing of the peer is vendored into this repository.

The result file records, per test file and in total, how many of the tests in scope pass, and
lists every failure with the deliberate difference (docs/compatibility.md) that explains it;
a failure that no listed difference explains is printed as UNEXPLAINED and makes the exit
status 1.

    python scripts/peer_compat.py --peer /work/peer --out benchmarks/results/peer_compat.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The peer's test files for the seed modules, by area (paths under the peer's `test/`).
SCOPE: dict[str, tuple[str, ...]] = {
    "chat": ("stdlib/components/test_chat.py",),
    "react": ("stdlib/components/test_react.py", "stdlib/frameworks/test_react_framework.py"),
    "requirements": (
        "stdlib/requirements/test_requirement.py",
        "core/test_requirement_helpers.py",
        "core/test_partial_validation_result.py",
    ),
    "core types": (
        "core/test_base.py",
        "core/test_computed_model_output_thunk.py",
        "core/test_model_output_thunk.py",
        "core/test_span_alias.py",
    ),
    "contexts": ("stdlib/test_base_context.py",),
    "compactors": ("stdlib/test_compactor.py",),
    "tools": (
        "backends/test_mellea_tool.py",
        "backends/test_tool_decorator.py",
        "backends/test_tool_helpers.py",
    ),
    "session": ("stdlib/test_session_unit.py",),
}

# Tests that need a service or hardware we do not run here (the peer marks them so).
SERVICE_MARKERS = ("ollama", "openai", "watsonx", "litellm", "bedrock", "vllm", "e2e",
                   "qualitative")

# Third-party packages some in-scope files import at the top for interop tests only (the
# tests that use them are in INTEROP): stood in for by placeholders so the file collects.
ABSENT_THIRD_PARTY = ("langchain_core", "langchain_core.tools", "smolagents")

# Tests of the peer's adapters to other agent libraries (langchain, smolagents): out of scope,
# we ship no such adapters (docs/compatibility.md, "Not provided").
INTEROP: dict[str, str] = {}

# Tests of the peer's private streaming machinery (its queue, chunking and task fields), which
# are not public API: excluded from the pass rate, listed in the result file.
PRIVATE_STREAMING: dict[str, str] = {}

# Failures explained by a deliberate difference, keyed by pytest node id (relative to the
# peer's `test/` folder) -> the docs/compatibility.md section that explains it.
DELIBERATE: dict[str, str] = {}

CONFTEST = '''\
import sys
sys.path.insert(0, {shim_dir!r})
import peer_shim
peer_shim.install()
peer_shim.stub_absent({absent!r})


def pytest_configure(config):
    for name in {markers!r}:
        config.addinivalue_line("markers", name + ": peer marker")
'''

PYTEST_INI = """\
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
addopts = -p no:cacheprovider
"""

MARKERS = (*SERVICE_MARKERS, "unit", "integration", "huggingface", "slow", "plugins", "llm")


def build_tree(peer_test: Path, dest: Path) -> list[str]:
    """Copy the scoped test files (and their packages' __init__) into dest/test/."""
    files = []
    (dest / "test").mkdir(parents=True)
    (dest / "test" / "__init__.py").write_text("")
    for paths in SCOPE.values():
        for rel in paths:
            src = peer_test / rel
            if not src.exists():
                raise SystemExit(f"{src} is missing: pass --peer the peer repository's root")
            target = dest / "test" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            for parent in target.relative_to(dest / "test").parents:
                init = dest / "test" / parent / "__init__.py"
                if not init.exists():
                    init.write_text("")
            shutil.copyfile(src, target)
            files.append(rel)
    (dest / "test" / "conftest.py").write_text(
        CONFTEST.format(shim_dir=str(REPO / "tests" / "compat"), markers=MARKERS,
                        absent=ABSENT_THIRD_PARTY)
    )
    (dest / "pytest.ini").write_text(PYTEST_INI)
    return files


def run_pytest(dest: Path, junit: Path, timeout: int) -> str:
    deselect = " or ".join(SERVICE_MARKERS)
    cmd = [sys.executable, "-m", "pytest", "test", "-q", "-m", f"not ({deselect})",
           f"--junitxml={junit}", "-o", "junit_family=xunit1",
           "--continue-on-collection-errors", "-p", "no:randomly"]
    for node in {**PRIVATE_STREAMING, **INTEROP}:
        cmd += ["--deselect", f"test/{node}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=str(REPO))
    proc = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return proc.stdout + proc.stderr


def read_junit(junit: Path) -> list[dict]:
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        file = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        file = file.removeprefix("test/")
        node = f"{file}::{case.get('name')}"
        status = "passed"
        message = ""
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed"
                message = (child.get("message") or "").splitlines()[0][:300] if child.get(
                    "message") else ""
            elif child.tag == "skipped":
                status = "skipped"
                message = (child.get("message") or "")[:200]
        cases.append({"node": node, "file": file, "status": status, "message": message})
    return cases


def summarise(cases: list[dict]) -> dict:
    per_file: dict[str, dict[str, int]] = {}
    failures = []
    for case in cases:
        counts = per_file.setdefault(case["file"], {"passed": 0, "failed": 0, "skipped": 0})
        counts[case["status"]] += 1
        if case["status"] == "failed":
            failures.append({"node": case["node"], "message": case["message"],
                             "deliberate": DELIBERATE.get(case["node"])})
    passed = sum(c["passed"] for c in per_file.values())
    failed = sum(c["failed"] for c in per_file.values())
    return {
        "passed": passed,
        "failed": failed,
        "skipped": sum(c["skipped"] for c in per_file.values()),
        "pass_rate": round(100.0 * passed / max(1, passed + failed), 1),
        "per_file": per_file,
        "failures": failures,
        "unexplained": [f["node"] for f in failures if not f["deliberate"]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", type=Path, default=Path(os.environ.get("PEER_MELLEA",
                                                                         "/work/peer")),
                        help="the peer repository's root (holding test/)")
    parser.add_argument("--out", type=Path, default=None, help="write the result JSON here")
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    peer_test = args.peer / "test" if (args.peer / "test").is_dir() else args.peer
    tmp = Path(tempfile.mkdtemp(prefix="peer_compat_"))
    try:
        files = build_tree(peer_test, tmp)
        junit = tmp / "junit.xml"
        log = run_pytest(tmp, junit, args.timeout)
        if not junit.exists():
            print(log)
            raise SystemExit("pytest wrote no report")
        result = summarise(read_junit(junit))
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "scope": {area: list(paths) for area, paths in SCOPE.items()},
        "files": files,
        "excluded_markers": list(SERVICE_MARKERS),
        "excluded_private_streaming": PRIVATE_STREAMING,
        "excluded_interop": INTEROP,
        **result,
    }
    print(f"peer tests in scope: {result['passed']} passed, {result['failed']} failed, "
          f"{result['skipped']} skipped; pass rate {result['pass_rate']} %")
    for name, counts in result["per_file"].items():
        print(f"  {name}: {counts}")
    for failure in result["failures"]:
        tag = failure["deliberate"] or "UNEXPLAINED"
        print(f"  FAIL [{tag}] {failure['node']}: {failure['message'][:160]}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if result["unexplained"] else 0


if __name__ == "__main__":
    sys.exit(main())
