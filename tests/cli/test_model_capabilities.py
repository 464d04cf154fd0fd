"""What the first-hour commands do on a model that lacks something they need: no
requirement-check adapter (``check`` stops with one line naming ``mellea-local train``) or a
chat template without tools (``react`` says it gives the model the Hermes tool
format). Real tiny models and
tokenizers; the SmolLM2 runs are in tests/models/test_first_hour_real.py."""

from __future__ import annotations

import copy
import json

from typer.testing import CliRunner

from mellea_local.cli import app
from mellea_local.cli.react_cmd import template_renders_tools, tool_format_line

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

    class Own:
        tokenizer = tiny_tokenizer

    # react no longer refuses such a model: it says which format it gives it instead.
    line = tool_format_line(Holder(), None)
    assert line.startswith("tool format: hermes (the chat template has no tool slot")
    assert line.endswith("constrained to the tools' schemas: on (default for this format)")
    assert tool_format_line(Own(), None).endswith("the chat template's own; calls constrained "
                                                  "to the tools' schemas: off (default for "
                                                  "this format)")
    assert tool_format_line(Holder(), False).endswith(": off")


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
