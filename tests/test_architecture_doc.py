"""ARCHITECTURE.md stays true: its layout names real modules, its io.yaml example loads."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from mellea_local.adapters import IOConfig

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "ARCHITECTURE.md").read_text("utf-8")


def test_every_module_the_layout_names_exists():
    layout = DOC.split("```\nmellea_local/\n", 1)[1].split("```", 1)[0]
    folder = ROOT / "mellea_local"
    current = folder
    named = 0
    for line in layout.splitlines():
        match = re.match(r"^(  +)([\w/ ]+?\.py|[\w]+/)\s", line + " ")
        if not match:
            continue
        indent, name = len(match.group(1)), match.group(2)
        if indent == 2:
            current = folder
        for part in name.split():
            path = (folder if indent == 2 else current) / part.rstrip("/")
            assert path.exists(), f"ARCHITECTURE.md names {part}, which is not in mellea_local/"
            named += 1
        if indent == 2 and name.endswith("/") and " " not in name:
            current = folder / name.rstrip("/")
    assert named > 40


def test_the_add_an_intrinsic_example_is_a_supported_io_yaml():
    section = DOC.split("## Add an intrinsic", 1)[1].split("## Add a backend", 1)[0]
    text = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    config = IOConfig.from_dict(yaml.safe_load(text), source="ARCHITECTURE.md")
    config.check_supported()
    assert config.instruction_fields == {"question"}
    assert config.fast_path_spec() is not None
    rendered = config.render_instruction(question="Capital of France?")
    assert "Question: Capital of France?" in rendered and '{"verdict": "good"}' in rendered
    result = config.apply_transformations(
        {"verdict": "good"}, value_probs={"verdict": {"good": 0.75, "bad": 0.25}})
    assert result == {"answer_quality": {"verdict": 0.75}}
