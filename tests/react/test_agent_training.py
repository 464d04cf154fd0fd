"""The agent build: traces from scripts/make_agent_traces.py, each step's training prompt equal
to what ``react`` renders for that step, and `mellea-local train --task agent` end to end on
the embedded model (a smoke run: two steps, then the merged build loads and runs react)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mellea_local.cli import app
from mellea_local.core.context import ChatContext
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.core.tool_call import ModelToolCall
from mellea_local.messages import ToolMessage
from mellea_local.react.components import ReactInitiator, ReactThought
from mellea_local.rendering.request import render_request
from mellea_local.tools import AbstractMelleaTool
from mellea_local.training.agent import step_examples

ROOT = Path(__file__).parents[2]
spec = importlib.util.spec_from_file_location("make_agent_traces",
                                              ROOT / "scripts" / "make_agent_traces.py")
traces_mod = importlib.util.module_from_spec(spec)
sys.modules["make_agent_traces"] = traces_mod  # dataclasses look their module up
spec.loader.exec_module(traces_mod)

CHATML = ("{% for message in messages %}{{'<|start_of_role|>' + message['role'] + "
          "'<|end_of_role|>' + message['content'] + '<|end_of_text|>\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_of_role|>assistant<|end_of_role|>' }}"
          "{% endif %}")


class SpecTool(AbstractMelleaTool):
    def __init__(self, spec):
        self.spec = spec
        self.name = spec["function"]["name"]

    @property
    def as_json_tool(self):
        return self.spec

    def run(self, /, *args, **kwargs):
        return "unused"


def traces(tmp_path, n=6, seed=0, split="train"):
    out = tmp_path / f"{split}.jsonl"
    traces_mod.main(["--n", str(n), "--seed", str(seed), "--split", split, "-o", str(out)])
    return out, [json.loads(line) for line in out.read_text().splitlines()]


def test_traces_are_reproducible_and_cover_the_variants(tmp_path):
    a, rows = traces(tmp_path, n=200)
    b = tmp_path / "again.jsonl"
    traces_mod.main(["--n", "200", "--seed", "0", "-o", str(b)])
    assert a.read_text() == b.read_text()
    steps = [len(r["steps"]) for r in rows]
    assert min(steps) == 1 and max(steps) >= 4  # direct answers ... 3 facts with a recovery
    texts = [s["observation"] for r in rows for s in r["steps"]]
    assert any(t.startswith("Error: There is no tool") for t in texts)
    assert any("failed: ValueError" in t for t in texts)
    assert all(6 <= len(r["tools"]) <= 8 for r in rows)
    assert all(r["steps"][-1]["call"]["name"] == "final_answer" for r in rows)
    kinds = json.dumps([r["tools"] for r in rows])
    assert all(k in kinds for k in ('"enum"', '"number"', '"integer"', '"format": "date"',
                                    '"type": "object", "description"'))
    _, held = traces(tmp_path, n=40, split="heldout")
    train_names = {s["function"]["name"].rsplit("_", 1)[0] for r in rows for s in r["tools"]}
    used = {f["tool"].rsplit("_", 1)[0] for r in held for f in r["facts"]}
    assert used and not used & train_names  # held-out facts come from unseen tools


@pytest.mark.parametrize("chatml", [False, True])
def test_each_training_prompt_is_what_react_renders_for_that_step(tiny_tokenizer, tmp_path,
                                                                  chatml):
    tok = copy.deepcopy(tiny_tokenizer)
    if chatml:
        tok.chat_template = CHATML
    _, rows = traces(tmp_path, n=30)
    trace = next(r for r in rows if len(r["steps"]) >= 3)
    examples = step_examples(trace, tok)
    init = ReactInitiator(trace["goal"], [SpecTool(s) for s in trace["tools"]
                                          if s["function"]["name"] != "final_answer"])
    ctx, action = ChatContext(), init
    for k, step in enumerate(trace["steps"]):
        ids, _, _ = render_request(tok, action, ctx, base_options=None, model_options=None,
                                   model_id="m", positions=None, tool_calls=True)
        assert examples[k][0] == ids, k
        mot = ModelOutputThunk("")
        mot.thinking = step["thinking"]
        raw = json.dumps(step["call"]["arguments"], ensure_ascii=False)
        call = ModelToolCall(step["call"]["name"], None, step["call"]["arguments"],
                             tool_call_id=f"call_{k:04d}", raw_arguments=raw)
        mot.tool_calls = [call]
        ctx = ctx.add(action).add(mot).add(ToolMessage(
            "tool", step["observation"], None, call.name, call.args, call))
        action = ReactThought()
    target = tok.decode(examples[0][1])
    assert trace["steps"][0]["call"]["name"] in target
    assert target.endswith(tok.eos_token)


def test_train_task_agent_lora_smoke_on_the_embedded_model(tmp_path):
    data, _ = traces(tmp_path, n=4)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["train", str(data), "--task", "agent", "--model",
                                      "embedded", "--out", str(out), "--max-steps", "2",
                                      "--batch-size", "2", "--threads", "1",
                                      "--max-length", "4096", "--kind", "lora"])
    assert result.exit_code == 0, result.output
    merged = next(out.glob("agent/*/merged"))
    report = json.loads((merged / "training.json").read_text())
    assert report["steps"] == 2 and report["task"] == "agent"
    assert (merged.parent / "lora" / "adapter_model.safetensors").is_file()
    assert (merged.parent / "checkpoint" / "state.json").is_file()

    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.errors import ReactLoopError
    from mellea_local.options import ModelOption
    from mellea_local.react import react
    from mellea_local.tools import calculator

    backend = LocalHFBackend(str(merged), device="cpu")
    # Two steps of training teach nothing; the build loads and runs the loop.
    with contextlib.suppress(ReactLoopError):
        asyncio.run(react("What is 2 + 3?", ChatContext(), backend, tools=[calculator],
                          loop_budget=1, model_options={ModelOption.MAX_NEW_TOKENS: 32}))


def test_train_task_agent_alora_is_invoked_at_the_assistant_header(tmp_path, tiny_tokenizer,
                                                                   embedded_backend):
    import torch
    from safetensors.torch import load_file

    from mellea_local.training.agent import invocation_ids

    data, _ = traces(tmp_path, n=4)
    out = tmp_path / "out"
    args = ["train", str(data), "--task", "agent", "--model", "embedded", "--out", str(out),
            "--max-steps", "2", "--batch-size", "2", "--threads", "1", "--max-length", "4096",
            "--checkpoint-every", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    built = next(out.glob("agent/*/alora"))
    trained = load_file(str(built / "adapter_model.safetensors"))
    # The last checkpoint (step 2) exported without training is the same adapter.
    result = CliRunner().invoke(app, [*args, "--export-checkpoint"])
    assert result.exit_code == 0, result.output
    exported = load_file(str(built / "adapter_model.safetensors"))
    assert trained.keys() == exported.keys()
    assert all(torch.equal(trained[k], exported[k]) for k in trained)
    assert json.loads((built / "training.json").read_text())["exported_from_checkpoint"]
    other = CliRunner().invoke(app, [*args[:-2], "--lr", "0.1", "--export-checkpoint"])
    assert other.exit_code != 0 and "other options" in other.output, other.output
    result = CliRunner().invoke(app, args)  # train again: the build of the finished run
    assert result.exit_code == 0, result.output
    config = json.loads((built / "adapter_config.json").read_text())
    header = invocation_ids(tiny_tokenizer)
    assert config["alora_invocation_tokens"] == header
    assert "assistant" in tiny_tokenizer.decode(header)
    report = json.loads((built / "training.json").read_text())
    assert report["steps"] == 2 and report["invocation_tokens"] == header
    assert not (built.parent / "merged").exists()  # an aLoRA is never merged into the base
    assert (built / "io.yaml").is_file()  # the library layout: admitted as it is
    assert config["base_model_name_or_path"] == "mellea-tiny-chat"  # a name, not a cache path

    embedded_backend.add_adapter(str(built), intrinsic="agent")
    assert embedded_backend.adapter_for("agent").path == built


def test_alora_agent_loss_equals_the_whole_sequence_through_peft(tiny_model, tiny_tokenizer,
                                                                 tmp_path):
    """The split (one prompt forward per trace without autograd, its cache cropped to each
    step, header and step through the adapter) gives the loss and gradients of every whole
    sequence through PEFT's aLoRA (float32, 1e-5)."""
    import torch
    import torch.nn.functional as F
    from peft import LoraConfig, get_peft_model

    from mellea_local.training.agent import _alora_loss, invocation_ids

    tok = copy.deepcopy(tiny_tokenizer)
    _, rows = traces(tmp_path, n=12)
    chosen = [step_examples(r, tok) for r in rows if len(r["steps"]) >= 2][:2]
    examples = [ex for steps in chosen for ex in steps]
    header = invocation_ids(tok)
    assert all(p[-len(header):] == header for p, _ in examples)
    model = get_peft_model(copy.deepcopy(tiny_model), LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
        alora_invocation_tokens=header))
    params = [p for p in model.parameters() if p.requires_grad]
    split = _alora_loss(model, chosen, len(header), backward=True)
    split_grads = [p.grad.clone() for p in params]
    model.zero_grad()
    total = sum(len(t) for _, t in examples)
    whole = 0.0
    for prompt, step in examples:
        ids = torch.tensor([prompt + step])
        logits = model(input_ids=ids, alora_offsets=[len(header) + len(step)]).logits[0]
        loss = F.cross_entropy(logits[len(prompt) - 1:-1].float(), torch.tensor(step),
                               reduction="sum") / total
        loss.backward()
        whole += float(loss)
    assert abs(split - whole) < 1e-5
    for a, p in zip(split_grads, params, strict=True):
        torch.testing.assert_close(a, p.grad, atol=1e-5, rtol=1e-4)
    assert any(g.abs().sum() > 0 for g in split_grads)  # the adapter was really trained
