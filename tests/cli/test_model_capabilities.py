"""What the first-hour commands do on a model that lacks something they need: no
requirement-check adapter (``check`` stops with one line naming ``mellea-local train``) or a
chat template without tools (``react`` stops before its first step). Real tiny models and
tokenizers; the SmolLM2 runs are in tests/models/test_first_hour_real.py."""

from __future__ import annotations

import copy
import json

from typer.testing import CliRunner

from mellea_local.cli import app
from mellea_local.cli.react_cmd import require_tool_template, template_renders_tools
from mellea_local.errors import ReactArgumentError

runner = CliRunner()
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def test_the_embedded_template_renders_tools_a_plain_chatml_one_does_not(tiny_tokenizer):
    assert template_renders_tools(tiny_tokenizer)
    plain = copy.deepcopy(tiny_tokenizer)
    plain.chat_template = CHATML
    assert not template_renders_tools(plain)

    class Holder:
        tokenizer = plain

    try:
        require_tool_template(Holder(), "my-model")
    except ReactArgumentError as exc:
        assert "--model my-model" in str(exc) and "no tool-call format" in str(exc)
    else:
        raise AssertionError("a template without tools was accepted")


def test_check_without_an_adapter_names_the_train_command(cli_model, tmp_path):
    model_dir, _ = cli_model
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "Hi"},
                                             {"role": "assistant", "content": "Hello."}],
                                "requirement": "Be polite."}) + "\n")
    out = tmp_path / "o.jsonl"
    result = runner.invoke(app, ["check", str(data), "-o", str(out), "--model", str(model_dir),
                                 "--threads", "1"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert text.startswith("error: no requirement-check adapter exists for model")
    assert f"mellea-local train data.jsonl --model {model_dir}" in text
    assert not out.exists()  # nothing written that could pass for scores


def test_check_on_ray_says_it_before_any_actor_starts(cli_model, tmp_path):
    model_dir, _ = cli_model
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "Hi"},
                                             {"role": "assistant", "content": "Hello."}],
                                "requirement": "Be polite."}) + "\n")
    result = runner.invoke(app, ["check", str(data), "-o", str(tmp_path / "o.jsonl"),
                                 "--model", str(model_dir), "--pool", "ray"])
    assert result.exit_code == 1
    assert " ".join(result.output.split()).startswith(
        "error: no requirement-check adapter exists for model")


def test_demo_with_a_missing_model_is_one_line(tmp_path):
    result = runner.invoke(app, ["demo", "--model", str(tmp_path / "no-such-model")])
    assert result.exit_code == 1
    assert result.output.startswith("error: --model") and "Traceback" not in result.output
