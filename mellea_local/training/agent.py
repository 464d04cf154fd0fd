"""``mellea-local train --task agent``: fine-tune a model on ReACT traces (an agent build).

Why: a small chat model that was never trained on tool calls misuses tools even when a grammar
keeps its calls well-formed. Training on traces (``scripts/make_agent_traces.py``: random tools,
thinking, calls, results, recoveries) teaches it the loop. Each assistant step of a trace is
one example: the prompt is rendered exactly as ``react`` renders that step at inference (the
same components, the same tool format: the template's own, or the Hermes fallback of
``rendering.tool_prompt``), and the loss is on the step's tokens only (its thinking and call,
up to the end-of-turn token).

Two kinds of build (``AgentTrainConfig.alora``):

* **aLoRA (default)**: an activated LoRA whose invocation is the template's assistant header
  (``<|im_start|>assistant\n`` on ChatML). Every token before a step's header (the tools, the
  goal, earlier steps and observations) stays the base model's, so the KV cache that a step
  reuses, and that a requirement check after the agent's turn reuses, is the base model's
  cache: agent steps and checks share one conversation prefill. Training is cheap for the same
  reason: the prompt runs once without autograd and only the header and the step (tens of
  tokens) carry gradients (the split ``training.loop`` uses for check adapters).
  Output: ``OUT/agent/<base>/alora/`` (PEFT aLoRA, safetensors, ``training.json``).
* **LoRA** (``alora=False``): a plain LoRA on every token, written as ``OUT/agent/<base>/lora/``
  and ``OUT/agent/<base>/merged/`` (the base with the LoRA merged in, a plain model folder
  ``LocalHFBackend`` loads). Its prefill is not the base model's, so a check after its turn
  cannot reuse the agent's cache with a check adapter trained on the base.

Checkpoints under ``OUT/agent/<base>/checkpoint/`` every ``checkpoint_every`` steps; the same
command resumes from the last one.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from mellea_local.errors import TrainingDataError, TrainingError
from mellea_local.react.components import (
    MELLEA_FINALIZER_TOOL,
    ReactInitiator,
    ReactThought,
    finalizer_tool,
)
from mellea_local.rendering.chat import to_chat_messages
from mellea_local.rendering.control_tokens import RenderedPrompt
from mellea_local.rendering.prompt import render_prompt
from mellea_local.rendering.tool_prompt import (
    hermes_messages,
    needs_tool_prompt,
    template_renders_tool_role,
)

__all__ = ["AgentTrainConfig", "export_checkpoint", "step_examples", "train_agent"]


@dataclass
class AgentTrainConfig:
    """What ``train_agent`` needs; ``out`` is a folder root (``OUT/agent/<base>/...``)."""

    data: str
    out: str
    model: str = "smollm2-135m"
    epochs: int = 1
    max_steps: int | None = None
    batch_size: int = 4
    lr: float = 5e-4
    # IBM's aLoRA recipe (all linear layers, r32): an aLoRA sees the prompt only through the
    # base model's keys and values, so it gets more capacity than a plain LoRA would need.
    rank: int = 32
    alpha: int = 64
    alora: bool = True
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                       "up_proj", "down_proj")
    seed: int = 0
    max_length: int = 1024
    checkpoint_every: int = 25
    device: str | None = None
    dtype: str | None = None


def _call_id(step: int) -> str:
    return f"call_{step:04d}"


def _turns(trace: dict[str, Any], upto: int) -> list[dict[str, Any]]:
    """The message dicts ``react`` renders before step ``upto`` (0-based) of ``trace``."""
    initiator = ReactInitiator(trace["goal"])
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": to_chat_messages([initiator])[0].content}]
    for i, step in enumerate(trace["steps"][:upto]):
        turns.append(_assistant(step, i))
        turns.append({"role": "tool", "content": step["observation"],
                      "tool_call_id": _call_id(i), "name": step["call"]["name"]})
        turns.append({"role": "user", "content": ReactThought().prompt})
    return turns


def _assistant(step: dict[str, Any], i: int) -> dict[str, Any]:
    call = step["call"]
    turn: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [{
        "id": _call_id(i), "type": "function", "function": {
            "name": call["name"],
            "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}]}
    if step.get("thinking"):
        turn["reasoning_content"] = step["thinking"]
    return turn


def _render(tokenizer: Any, turns: list[dict[str, Any]], specs: list[dict[str, Any]],
            *, generation: bool) -> RenderedPrompt:
    """What ``rendering.request.render_request`` renders for these turns and tools."""
    if needs_tool_prompt(tokenizer, turns, specs):
        turns = hermes_messages(turns, specs, tool_role=template_renders_tool_role(tokenizer))
        return render_prompt(tokenizer, turns, None, add_generation_prompt=generation)
    return render_prompt(tokenizer, turns, specs, add_generation_prompt=generation)


def step_examples(trace: dict[str, Any], tokenizer: Any) -> list[tuple[list[int], list[int]]]:
    """``(prompt ids, step ids)`` for each assistant step of ``trace``.

    The prompt is what ``react`` feeds the model before that step; the step ids are the
    template's rendering of the step's turn, up to and including the end-of-turn token.
    """
    # As ``ReactInitiator`` offers them: the trace's tools in order, ``final_answer`` last.
    specs = [s for s in trace["tools"] if s["function"]["name"] != MELLEA_FINALIZER_TOOL]
    specs.append(finalizer_tool().as_json_tool)
    out = []
    eos = tokenizer.eos_token
    for k in range(len(trace["steps"])):
        before = _turns(trace, k)
        prompt = _render(tokenizer, before, specs, generation=True)
        full = _render(tokenizer, [*before, _assistant(trace["steps"][k], k)], specs,
                       generation=False)
        if not full.text.startswith(prompt.text):
            raise TrainingDataError(
                f"Trace {trace.get('id')!r} step {k}: the chat template does not render a "
                "conversation as a prefix of its continuation, so a step cannot be cut out "
                "of it; this model's template is not supported for agent training.")
        end = len(full.text)
        if eos and (at := full.text.find(eos, len(prompt.text))) != -1:
            end = at + len(eos)  # the step ends with its end-of-turn token
        out.append((prompt.encode(tokenizer),
                    full.encode(tokenizer, start=len(prompt.text), end=end)))
    return out


def invocation_ids(tokenizer: Any) -> list[int]:
    """The template's assistant header as token ids: what an agent aLoRA is invoked by.

    Found as the text a generation prompt adds after the last turn, and checked to be a whole
    token sequence at the end of a rendered prompt (a header that merged with the text before
    it could never be found in the tokens actually fed)."""
    turns = [{"role": "user", "content": "Hi"}]
    bare = render_prompt(tokenizer, turns, None, add_generation_prompt=False)
    asked = render_prompt(tokenizer, turns, None, add_generation_prompt=True)
    header = asked.text[len(bare.text):] if asked.text.startswith(bare.text) else ""
    ids = tokenizer.encode(header, add_special_tokens=False) if header else []
    full = asked.encode(tokenizer)
    if not ids or full[-len(ids):] != ids:
        raise TrainingDataError(
            "This model's chat template has no assistant header that tokenizes on its own "
            f"(header {header!r}), so an agent aLoRA cannot be invoked by it; train a plain "
            "LoRA instead (AgentTrainConfig(alora=False)).")
    return ids


def load_traces(path: str) -> list[dict[str, Any]]:
    traces = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            trace = json.loads(line)
            assert isinstance(trace["goal"], str) and trace["steps"] and trace["tools"]
        except (ValueError, KeyError, TypeError, AssertionError) as exc:
            raise TrainingDataError(
                f"{path} line {n} is not a ReACT trace ({exc!r}); make traces with "
                "scripts/make_agent_traces.py (goal, tools, steps with thinking, call, "
                "observation).") from exc
        traces.append(trace)
    if not traces:
        raise TrainingDataError(f"{path} holds no traces.")
    return traces


def _load(cfg: AgentTrainConfig) -> tuple[Any, Any, str]:
    from mellea_local.backends.loading import (
        load_pretrained,
        resolve_device,
        resolve_dtype,
        resolve_model_source,
    )

    if cfg.model == "embedded":
        from mellea_local.embedded import trained_weights_dir

        source = str(trained_weights_dir())
    else:
        source = resolve_model_source(cfg.model)
    device = resolve_device(cfg.device)
    model, tokenizer = load_pretrained(source, device=device,
                                       dtype=resolve_dtype(cfg.dtype, device))
    return model, tokenizer, Path(source.rstrip("/")).name


def _batch(rows: list[tuple[list[int], list[int]]], pad: int, device: Any) -> dict[str, Any]:
    width = max(len(p) + len(t) for p, t in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (p, t) in enumerate(rows):
        seq = p + t
        ids[r, : len(seq)] = torch.tensor(seq)
        labels[r, len(p): len(seq)] = torch.tensor(t)
        mask[r, : len(seq)] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device),
            "labels": labels.to(device)}


def _loss(model: Any, batch: dict[str, Any]) -> torch.Tensor:
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                           batch["labels"][:, 1:].reshape(-1), ignore_index=-100)


def _alora_loss(model: Any, traces: list[list[tuple[list[int], list[int]]]], header: int,
                backward: bool) -> float:
    """Mean token loss of the steps of ``traces`` (each a list of ``(prompt, step)``) through
    an aLoRA invoked by each prompt's last ``header`` tokens; with ``backward`` the gradients
    are accumulated.

    Under an aLoRA the tokens before the header are the base model's, so they run without
    autograd and carry no gradient: the same loss and gradients as each whole sequence through
    PEFT (a test bounds the difference). A trace's step prompts are prefixes of one another
    (each adds the previous step, its observation and the next user turn), so one base forward
    over the last step's prompt serves every step: its cache is cropped to each step's prompt,
    the longest first, and the header and the step run through the adapter on top. This is
    what makes the build affordable on a CPU: the prompt (tools and goal, ~1,000 tokens) is
    most of a trace's tokens and is read once per trace instead of once per step."""
    from mellea_local.backends.cache_compat import cache_kwarg_name, crop_to, output_cache

    base = model.get_base_model()
    device = model.device
    total = sum(len(t) for steps in traces for _, t in steps)
    value = 0.0
    for steps in traces:
        cuts = [len(prompt) - header for prompt, _ in steps]
        longest = max(range(len(steps)), key=cuts.__getitem__)
        head = steps[longest][0][:cuts[longest]]
        shared = all(prompt[:cut] == head[:cut] for (prompt, _), cut in zip(steps, cuts,
                                                                             strict=True))
        groups = [steps] if shared else [[one] for one in steps]
        for group in groups:
            gcuts = [len(prompt) - header for prompt, _ in group]
            top = max(range(len(group)), key=gcuts.__getitem__)
            with torch.no_grad():
                ids = torch.tensor([group[top][0][:gcuts[top]]], device=device)
                cache = output_cache(base(input_ids=ids, use_cache=True, logits_to_keep=1))
            for i in sorted(range(len(group)), key=gcuts.__getitem__, reverse=True):
                prompt, step = group[i]
                crop_to(cache, gcuts[i])
                for layer in cache.layers:  # the prompt's K/V: no graph from an earlier step
                    layer.keys, layer.values = layer.keys.detach(), layer.values.detach()
                tail = prompt[gcuts[i]:] + step
                logits = model(input_ids=torch.tensor([tail], device=device),
                               alora_offsets=[len(tail)], use_cache=True,
                               logits_to_keep=len(step) + 1,
                               **{cache_kwarg_name(base): cache}).logits[0, :-1].float()
                loss = F.cross_entropy(logits, torch.tensor(step, device=device),
                                       reduction="sum") / total
                if backward:
                    loss.backward()
                value += float(loss.detach())
    return value


def _peft_config(cfg: AgentTrainConfig, invocation: list[int] | None) -> Any:
    """The adapter ``cfg`` trains: an aLoRA invoked by ``invocation``, or a LoRA (None)."""
    from peft import LoraConfig

    return LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=0.0,
                      target_modules=list(cfg.target_modules), task_type="CAUSAL_LM",
                      alora_invocation_tokens=invocation)


def train_agent(cfg: AgentTrainConfig, *, on_step: Callable[[int, int, float], None] | None = None
                ) -> Path:
    """Train the agent build and write it; returns the aLoRA folder (``alora=True``) or the
    merged model folder (``alora=False``)."""
    from peft import get_peft_model
    from safetensors.torch import load_file, save_file

    traces = load_traces(cfg.data)
    model, tokenizer, base = _load(cfg)
    by_trace = [step_examples(trace, tokenizer) for trace in traces]
    rows = [ex for steps in by_trace for ex in steps]
    too_long = [i for i, (p, t) in enumerate(rows) if len(p) + len(t) > cfg.max_length]
    if too_long:
        raise TrainingDataError(
            f"{len(too_long)} step(s) are longer than --max-length {cfg.max_length} tokens "
            f"(first: example {too_long[0]}); raise --max-length or offer fewer tools.")
    root = Path(cfg.out) / "agent" / base
    ckpt = root / "checkpoint"
    invocation = invocation_ids(tokenizer) if cfg.alora else None
    if invocation is not None:
        bad = [i for i, (p, _) in enumerate(rows) if p[-len(invocation):] != invocation]
        if bad:
            raise TrainingDataError(
                f"{len(bad)} step prompt(s) do not end with the assistant header "
                f"{invocation} (first: example {bad[0]}); the aLoRA could not be invoked there.")
    torch.manual_seed(cfg.seed)
    model = get_peft_model(model, _peft_config(cfg, invocation))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    # An aLoRA batch is ``batch_size`` traces (their steps share one prompt forward); a LoRA
    # batch is ``batch_size`` steps.
    units = len(by_trace) if invocation is not None else len(rows)
    per_epoch = math.ceil(units / cfg.batch_size)
    total = per_epoch * cfg.epochs if cfg.max_steps is None else min(
        cfg.max_steps, per_epoch * cfg.epochs)
    key = json.dumps({**asdict(cfg), "device": None, "rows": len(rows)}, sort_keys=True)
    start = 0
    if (ckpt / "state.json").is_file():
        state = json.loads((ckpt / "state.json").read_text())
        if state["key"] != key:
            raise TrainingError(
                f"The checkpoint in {ckpt} belongs to a different run (other data or "
                "options); delete it to start over.")
        weights = load_file(str(ckpt / "adapter.safetensors"))
        for name, p in model.named_parameters():
            if name in weights:
                p.data.copy_(weights[name])
        optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
        start = state["step"]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (
        tokenizer.eos_token_id)
    model.train()
    started = time.time()
    loss_value = math.nan
    for step in range(start, total):
        epoch, within = divmod(step, per_epoch)
        order = list(range(units))
        random.Random(f"{cfg.seed}:{epoch}").shuffle(order)
        picked = order[within * cfg.batch_size:(within + 1) * cfg.batch_size]
        warm = max(1, total // 20)
        for group in optimizer.param_groups:
            group["lr"] = cfg.lr * ((step + 1) / warm if step < warm else
                                    1.0 - 0.9 * (step - warm) / max(1, total - warm))
        optimizer.zero_grad(set_to_none=True)
        if invocation is not None:
            loss_value = _alora_loss(model, [by_trace[i] for i in picked], len(invocation),
                                     backward=True)
        else:
            loss = _loss(model, _batch([rows[i] for i in picked], pad, model.device))
            loss.backward()
            loss_value = float(loss.detach())
        if not math.isfinite(loss_value):
            raise TrainingError(f"The loss became {loss_value} at step {step + 1}; lower --lr.")
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if on_step is not None:
            on_step(step + 1, total, loss_value)
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == total:
            tmp = ckpt.with_name("checkpoint.writing")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            save_file({n: p.detach().cpu().contiguous() for n, p in model.named_parameters()
                       if p.requires_grad}, str(tmp / "adapter.safetensors"))
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            (tmp / "state.json").write_text(json.dumps({"key": key, "step": step + 1,
                                                        "loss": loss_value}))
            shutil.rmtree(ckpt, ignore_errors=True)
            tmp.rename(ckpt)
    report = {"task": "agent", "base": base, "steps": total, "examples": len(rows),
              "traces": len(traces), "final_loss": loss_value,
              "seconds": round(time.time() - started, 1), "config": asdict(cfg),
              "invocation_tokens": invocation}
    return _write_build(model, tokenizer, root, report, alora=invocation is not None)


def _write_build(model: Any, tokenizer: Any, root: Path, report: dict[str, Any], *,
                 alora: bool) -> Path:
    """Write the build under ``root``: ``alora/`` for an aLoRA; ``lora/`` and ``merged/`` for a
    LoRA. Returns the folder a user loads."""
    model.eval()
    if alora:
        from mellea_local.adapters import AGENT_IO_YAML

        out = root / "alora"
        shutil.rmtree(out, ignore_errors=True)
        model.save_pretrained(str(out))
        _name_base(out, root.name)
        shutil.copyfile(AGENT_IO_YAML, out / "io.yaml")  # what admission reads: loads as is
        (out / "training.json").write_text(json.dumps(report, indent=1) + "\n")
        return out
    lora = root / "lora"
    shutil.rmtree(lora, ignore_errors=True)
    model.save_pretrained(str(lora))
    (lora / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    merged = root / "merged"
    shutil.rmtree(merged, ignore_errors=True)
    plain = model.merge_and_unload()
    plain.save_pretrained(str(merged), safe_serialization=True)
    tokenizer.save_pretrained(str(merged))
    (merged / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    return merged


def _name_base(folder: Path, base: str) -> None:
    """Record the base model by its name, not by the cache path it was loaded from (which is
    this machine's): admission compares it with the backend's model."""
    config_path = folder / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = base
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def export_checkpoint(cfg: AgentTrainConfig) -> Path:
    """Write the build from the last checkpoint of ``cfg``'s run, without training.

    Why: a CPU run of hundreds of steps takes hours; this lands what it has learnt so far
    (``training.json`` says at which step of how many) while the run itself goes on or is
    resumed later with the same command. The checkpoint must belong to ``cfg`` (the same
    options; the data is not re-read, so its line count is not compared)."""
    from peft import get_peft_model
    from safetensors.torch import load_file

    model, tokenizer, base = _load(cfg)
    root = Path(cfg.out) / "agent" / base
    ckpt = root / "checkpoint"
    if not (ckpt / "state.json").is_file():
        raise TrainingError(f"No checkpoint in {ckpt}: nothing to export; train first.")
    state = json.loads((ckpt / "state.json").read_text())
    theirs = {k: v for k, v in json.loads(state["key"]).items() if k not in ("rows", "device")}
    ours = json.loads(json.dumps({k: v for k, v in asdict(cfg).items() if k != "device"}))
    if theirs != ours:
        differ = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
        raise TrainingError(
            f"The checkpoint in {ckpt} belongs to a run with other options ({differ}); "
            "export it with the options it was trained with.")
    invocation = invocation_ids(tokenizer) if cfg.alora else None
    model = get_peft_model(model, _peft_config(cfg, invocation))
    weights = load_file(str(ckpt / "adapter.safetensors"))
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if set(weights) != set(trainable):
        raise TrainingError(f"The checkpoint in {ckpt} does not hold this adapter's weights.")
    for name, param in trainable.items():
        param.data.copy_(weights[name])
    report = {"task": "agent", "base": base, "steps": state["step"],
              "exported_from_checkpoint": True, "final_loss": state.get("loss"),
              "config": asdict(cfg), "invocation_tokens": invocation}
    return _write_build(model, tokenizer, root, report, alora=cfg.alora)


def run_agent_cli(cfg: AgentTrainConfig, *, threads: int | None) -> Path:
    """What ``mellea-local train --task agent`` does: train with a progress line, print where
    the agent build is and how to use it."""
    from rich.console import Console

    from mellea_local.threads import apply_threads

    apply_threads(threads)
    console = Console(stderr=True, soft_wrap=True)

    def show(step: int, total: int, loss: float) -> None:
        if step == 1 or step % 10 == 0 or step == total:
            console.print(f"step {step}/{total} loss {loss:.4f}")

    built = train_agent(cfg, on_step=show)
    if cfg.alora:
        console.print(f"agent aLoRA: {built}")
        return built
    console.print(f"agent LoRA: {built.parent / 'lora'}")
    console.print(f"use it: mellea-local react --model {built} \"GOAL\"")
    return built
