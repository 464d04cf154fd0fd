"""Bad command lines: each ends in one ``error:`` line naming the flag or file, a non-zero exit,
no traceback, and no model load (arguments are validated first, so a typo costs nothing).

Model loading is replaced by a tripwire for the whole module: a case that got as far as
loading weights fails loudly instead of spending seconds on a load.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from mellea_local.cli import app

runner = CliRunner()

GOOD_LINE = ('{"messages": [{"role": "user", "content": "Capital of France?"}, '
             '{"role": "assistant", "content": "Paris."}], "requirement": "Mention paris."}\n')


class ModelLoaded(AssertionError):
    """A bad command line reached the model load."""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli-corpus")
    made = {
        "input": root / "in.jsonl", "latin1": root / "latin1.jsonl", "empty_dir": root / "empty",
        "plain_file": root / "plain.txt", "bad_adapter": root / "bad-adapter",
        "garbage_out": root / "garbage-out.jsonl", "binary": root / "binary.jsonl",
    }
    made["input"].write_text(GOOD_LINE, encoding="utf-8")
    made["latin1"].write_bytes(GOOD_LINE.replace("Paris", "Par\xeds").encode("latin-1"))
    made["binary"].write_bytes(b"\xff\xfe\x00\x01" * 8)
    made["empty_dir"].mkdir()
    made["plain_file"].write_text("not a model\n")
    made["bad_adapter"].mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors", "io.yaml"):
        (made["bad_adapter"] / name).write_bytes(b"\xff{ not json")
    made["garbage_out"].write_text("this is not a results file\n")
    return made


@pytest.fixture(autouse=True)
def no_model_loads(monkeypatch):
    def tripwire(*args, **kwargs):
        raise ModelLoaded("a bad command line reached the model load")

    monkeypatch.setattr("mellea_local.backends.loading.load_pretrained", tripwire)
    monkeypatch.setattr("mellea_local.backends.hf.backend.load_pretrained", tripwire)
    monkeypatch.setattr("mellea_local.bench.subjects.build_sized_model", tripwire)


def _cases() -> list[tuple[str, list[str], str]]:
    """(id, argv with {file} placeholders, words the last line must hold)."""
    x = ["react", "What is 2 + 2?"]
    chk = ["check", "{input}", "-o", "{tmp}/out.jsonl"]
    bq = ["bench", "--quick", "--out-dir", "{tmp}/bench"]
    cases = [
        # the command itself
        ("no-such-command", ["bogus"], "No such command 'bogus'"),
        ("no-such-root-option", ["--bogus"], "--bogus"),
        ("react-no-goal", ["react"], "GOAL"),
        ("check-no-input", ["check"], "INPUT"),
        ("check-no-output", ["check", "{input}"], "--output"),
        ("demo-extra-argument", ["demo", "extra"], "extra"),
        ("chat-extra-argument", ["chat", "hello"], "hello"),
        ("react-unknown-option", [*x, "--frobnicate"], "--frobnicate"),
        ("react-option-needs-value", [*x, "--model"], "--model"),
        ("flag-takes-no-value", [*x, "--thinking=maybe"], "--thinking"),
        # --dtype
        ("dtype-float64", [*x, "--dtype", "float64"], "--dtype"),
        ("dtype-int8", [*x, "--dtype", "int8"], "--dtype"),
        ("dtype-empty", [*x, "--dtype", ""], "--dtype"),
        ("dtype-upper-case", [*x, "--dtype", "FLOAT32"], "--dtype"),
        ("dtype-torch-prefix", [*x, "--dtype", "torch.float32"], "--dtype"),
        ("dtype-bf16-embedded", [*x, "--dtype", "bfloat16"], "--dtype bfloat16"),
        ("dtype-fp16-embedded", [*x, "--dtype", "float16"], "--dtype float16"),
        ("chat-dtype", ["chat", "--dtype", "float64"], "--dtype"),
        ("check-dtype", [*chk, "--dtype", "double"], "--dtype"),
        ("bench-dtype", [*bq, "--dtype", "float64"], "--dtype"),
        # --device
        ("device-gpu", [*x, "--device", "gpu"], "--device"),
        ("device-empty", [*x, "--device", ""], "--device"),
        ("device-garbage", [*x, "--device", "cpu:zero"], "--device"),
        ("device-mps", [*x, "--device", "mps"], "--device"),
        ("chat-device", ["chat", "--device", "tpu"], "--device"),
        ("check-device", [*chk, "--device", "gpu0"], "--device"),
        ("bench-device", [*bq, "--device", "gpu"], "--device"),
        # numbers
        ("budget-zero", [*x, "--budget", "0"], "--budget"),
        ("budget-negative", [*x, "--budget", "-5"], "--budget"),
        ("budget-word", [*x, "--budget", "many"], "--budget"),
        ("budget-float", [*x, "--budget", "1.5"], "--budget"),
        ("react-max-tokens-zero", [*x, "--max-new-tokens", "0"], "--max-new-tokens"),
        ("react-max-tokens-negative", [*x, "--max-new-tokens", "-3"], "--max-new-tokens"),
        ("chat-max-tokens-word", ["chat", "--max-new-tokens", "lots"], "--max-new-tokens"),
        ("chat-max-tokens-zero", ["chat", "--max-new-tokens", "0"], "--max-new-tokens"),
        ("bench-repeats-zero", [*bq, "--repeats", "0"], "--repeats"),
        ("bench-examples-zero", [*bq, "--examples", "0"], "--examples"),
        ("bench-threads-zero", [*bq, "--threads", "0"], "--threads"),
        ("bench-seed-word", [*bq, "--seed", "abc"], "--seed"),
        ("bench-lengths-garbage", [*bq, "--lengths", "12x"], "--lengths"),
        ("bench-lengths-too-short", [*bq, "--lengths", "4"], "--lengths"),
        ("bench-size-unknown", [*bq, "--size", "huge"], "--size"),
        ("bench-size-and-model", [*bq, "--size", "tiny", "--model", "embedded"], "--size"),
        ("bench-skip-unknown", [*bq, "--skip", "everything"], "--skip"),
        ("bench-name-path", [*bq, "--name", "../escape"], "--name"),
        # text
        ("lookup-no-equals", [*x, "--lookup", "oops"], "--lookup"),
        ("lookup-no-key", [*x, "--lookup", "=france"], "--lookup"),
        ("goal-empty", ["react", ""], "GOAL"),
        ("goal-blank", ["react", "   "], "GOAL"),
        ("goal-not-utf8", ["react", "caf\udce9"], "GOAL"),
        ("system-not-utf8", ["chat", "--system", "be \udcff brief"], "--system"),
        # --model
        ("model-missing-folder", [*x, "--model", "./no-such-model"], "--model"),
        ("model-missing-absolute", [*x, "--model", "/no/such/model/dir"], "--model"),
        ("model-empty-string", [*x, "--model", ""], "--model"),
        ("model-empty-folder", [*x, "--model", "{empty_dir}"], "--model"),
        ("model-is-a-file", [*x, "--model", "{plain_file}"], "--model"),
        ("chat-model-missing", ["chat", "--model", "~/no-such-model"], "--model"),
        ("check-model-missing", [*chk, "--model", "./nope"], "--model"),
        ("bench-model-missing", [*bq, "--model", "./nope"], "--model"),
        # --adapter
        ("adapter-missing-folder", [*x, "--adapter", "./no-such-adapter"], "--adapter"),
        ("adapter-unknown-intrinsic", [*x, "--adapter", "no-such-intrinsic"], "--adapter"),
        ("adapter-empty-string", [*x, "--adapter", ""], "--adapter"),
        ("adapter-empty-folder", [*x, "--adapter", "{empty_dir}"], "--adapter"),
        ("adapter-is-a-file", [*x, "--adapter", "{plain_file}"], "--adapter"),
        ("adapter-garbage-files", [*x, "--adapter", "{bad_adapter}"], "--adapter"),
        ("chat-adapter-missing", ["chat", "--adapter", "./nope"], "--adapter"),
        ("check-adapter-missing", [*chk, "--adapter", "./nope"], "--adapter"),
        ("check-adapter-garbage", [*chk, "--adapter", "{bad_adapter}"], "--adapter"),
        # files and encodings
        ("check-input-missing", ["check", "{tmp}/none.jsonl", "-o", "{tmp}/o.jsonl"],
         "none.jsonl"),
        ("check-input-is-folder", ["check", "{empty_dir}", "-o", "{tmp}/o.jsonl"], "empty"),
        ("check-input-latin1", ["check", "{latin1}", "-o", "{tmp}/o.jsonl"], "latin1.jsonl"),
        ("check-input-binary", ["check", "{binary}", "-o", "{tmp}/o.jsonl"], "binary.jsonl"),
        ("check-output-is-input", ["check", "{input}", "-o", "{input}"], "in.jsonl"),
        ("check-output-garbage", ["check", "{input}", "-o", "{garbage_out}"],
         "garbage-out.jsonl"),
        # --pool ray: pool flags are checked before Ray (or a model) starts
        ("check-pool-unknown", [*chk, "--pool", "spark"], "--pool"),
        ("check-engine-unknown", [*chk, "--engine", "spark"], "--engine"),
        ("check-ray-actors-zero", [*chk, "--pool", "ray", "--actors", "0"], "--actors"),
        ("check-ray-batch-zero", [*chk, "--pool", "ray", "--batch-size", "0"],
         "--batch-size"),
        ("check-ray-flag-local", [*chk, "--actors", "2"], "--pool ray"),
        ("check-local-parquet-out", ["check", "{input}", "-o", "{tmp}/o.parquet"],
         "--pool ray"),
        ("bench-ray-actors-zero", [*bq, "--pool", "ray", "--actors", "0"], "--actors"),
        ("bench-dataset-missing", [*bq, "--dataset", "{tmp}/none.jsonl"], "none.jsonl"),
        ("bench-dataset-latin1", [*bq, "--dataset", "{latin1}"], "latin1.jsonl"),
        ("bench-dataset-binary", [*bq, "--dataset", "{binary}"], "binary.jsonl"),
    ]
    if torch.cuda.is_available():
        cases = [c for c in cases if "cuda" not in c[0]]
    else:
        cases += [("device-cuda-absent", [*x, "--device", "cuda"], "--device"),
                  ("device-cuda-index", [*x, "--device", "cuda:7"], "--device")]
    return cases


CASES = _cases()


def test_the_corpus_is_big_enough():
    assert len(CASES) >= 60
    assert len({case_id for case_id, _, _ in CASES}) == len(CASES)


@pytest.mark.parametrize(("argv", "words"), [(argv, words) for _, argv, words in CASES],
                         ids=[case_id for case_id, _, _ in CASES])
def test_a_bad_command_line_is_one_clear_error(argv, words, files, tmp_path):
    places = {name: str(path) for name, path in files.items()} | {"tmp": str(tmp_path)}
    args = [arg.format(**places) if "{" in arg else arg for arg in argv]
    result = runner.invoke(app, args)
    text = result.output
    assert result.exit_code not in (0, None), text
    assert "Traceback" not in text and not isinstance(result.exception, ModelLoaded), text
    last = text.strip().splitlines()[-1]
    assert last.startswith("error: "), text
    assert words in last, text
    # The user's arguments, not the API's parameter names.
    assert "loop_budget" not in text and "roots=" not in text, text
