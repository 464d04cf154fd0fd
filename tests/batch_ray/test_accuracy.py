"""``mellea-local bench --pool ray``: adapter accuracy on the Ray pool equals the local one."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from mellea_local.cli import app

SPEED = ("generation", "react", "requirement_check", "batched", "conversations")


def test_bench_accuracy_on_ray_equals_the_local_section(ray_cluster, shared_embedded_backend,
                                                         tmp_path):
    from mellea_local.bench.accuracy import evaluate_accuracy, synthetic_items

    skip = [arg for s in SPEED for arg in ("--skip", s)]
    result = CliRunner().invoke(app, ["bench", "--quick", "--out-dir", str(tmp_path), "--name",
                                      "r", "--examples", "1", *skip, "--pool", "ray",
                                      "--batch-size", "3"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "r.json").read_text())
    got = data["accuracy"]["splits"]["synthetic"]
    assert "--pool ray" in data["config"]["command"]
    # The same held-out set (1 per family, seed 9000), scored in this process.
    want = evaluate_accuracy(shared_embedded_backend, synthetic_items(9000, 1))
    assert got["examples"] == want["examples"] and got["families"] == want["families"]
    assert list(got["adapters"]) == list(want["adapters"])  # aLoRA first, then the LoRA
    assert {a["kind"] for a in got["adapters"].values()} == {"alora", "lora"}
    for name, cell in want["adapters"].items():
        for key in ("kind", "families", "overall", "mean_family_accuracy"):
            assert got["adapters"][name][key] == cell[key], (name, key)
        assert got["adapters"][name]["ms_per_check"] > 0
