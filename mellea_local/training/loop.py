"""``train_adapter``: a requirement-check aLoRA (default) or LoRA for any local base model.

PEFT's own aLoRA (``alora_invocation_tokens``), rows built by the inference prompt code
(``rows.py``), a seeded split with validation accuracy each epoch (the fast path's reading:
P(yes) > P(no) after the forced prefix), checkpoints that resume exactly (``checkpoint.py``),
and the result written in the library layout ``<root>/requirement-check/<base>/<kind>/`` with
io.yaml and ``training.json``, so ``backend.add_adapter("requirement-check")`` finds it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from mellea_local.adapters import REQUIREMENT_CHECK_IO_YAML
from mellea_local.adapters.catalog import require_intrinsic_name
from mellea_local.backends.cache_compat import cache_kwarg_name, output_cache
from mellea_local.core.backend import REQUIREMENT_CHECK
from mellea_local.errors import TrainingError
from mellea_local.intrinsics.scoring import category_tokens
from mellea_local.training.checkpoint import load_checkpoint, save_checkpoint
from mellea_local.training.data import load_training_data
from mellea_local.training.peer_io import write_peer_io_yaml
from mellea_local.training.rows import Row, adapter_record, answer_ids, build_rows

KINDS = ("alora", "lora")
REPORT = "training.json"
CHECKPOINT = ".checkpoint"


@dataclass
class TrainConfig:
    """Every setting of a run (all of them, except device and threads, key its checkpoint)."""

    data: str
    model: str = "embedded"
    kind: str = "alora"
    out_root: str = "adapters"
    intrinsic: str | None = None  # peer-format data: the custom intrinsic's name
    epochs: int = 3
    max_steps: int | None = None
    batch_size: int = 8
    lr: float = 1e-3  # SmolLM2 r=32 aLoRA at 1e-3 first passed 0.8 validation at epoch 2 of 3
    rank: int = 32
    alpha: int = 32
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj")
    validation: float = 0.2
    seed: int = 0
    max_length: int = 1024
    gradient_checkpointing: bool = False
    checkpoint_every: int = 25
    init_from: str | None = None  # a trained adapter folder of the same kind, rank, modules
    device: str | None = field(default=None, metadata={"key": False})
    dtype: str | None = None
    threads: int | None = field(default=None, metadata={"key": False})

    def check(self) -> None:
        if self.kind not in KINDS:
            raise TrainingError(f"kind={self.kind!r}; use alora (default) or lora.")
        for name in ("epochs", "batch_size", "rank", "alpha", "max_length", "checkpoint_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TrainingError(f"{name}={value!r} must be a whole number >= 1.")
        if self.max_steps is not None and (not isinstance(self.max_steps, int)
                                           or self.max_steps < 1):
            raise TrainingError(f"max_steps={self.max_steps!r} must be >= 1 (or None).")
        if not (isinstance(self.lr, float | int) and 0 < self.lr < 1):
            raise TrainingError(f"lr={self.lr!r} must be a learning rate in (0, 1).")
        if self.init_from is not None and not all(
                (Path(self.init_from) / name).is_file()
                for name in ("adapter_config.json", "adapter_model.safetensors")):
            raise TrainingError(
                f"--init-from {self.init_from!r}: not an adapter folder (it needs "
                "adapter_config.json and adapter_model.safetensors).")


@dataclass
class TrainingResult:
    path: Path
    report: dict[str, Any]


StepHook = Callable[[int, float], None]


def _run_key(cfg: TrainConfig, data_sha: str, total: int) -> str:
    keyed = {k: v for k, v in asdict(cfg).items()
             if k not in ("device", "threads", "out_root", "data", "model")}
    keyed.update(data_sha256=data_sha, total_steps=total, model=os.path.basename(
        os.path.normpath(cfg.model)))
    if cfg.init_from:  # the weights started from, not the folder's name
        weights = Path(cfg.init_from) / "adapter_model.safetensors"
        keyed["init_from"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()


def _load_base(cfg: TrainConfig) -> tuple[Any, Any, str]:
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
    dtype = resolve_dtype(cfg.dtype, device)
    model, tokenizer = load_pretrained(source, device=device, dtype=dtype)
    return model, tokenizer, Path(source.rstrip("/")).name


def batch_indices(step: int, n: int, batch_size: int, seed: int) -> list[int]:
    """The rows of ``step``: a pure function of the seed and the step, so a resumed run draws
    the same batches. Each epoch is its own seeded shuffle; its last batch may be short."""
    per_epoch = math.ceil(n / batch_size)
    epoch, within = divmod(step, per_epoch)
    order = list(range(n))
    random.Random(seed * 1000 + epoch).shuffle(order)
    return order[within * batch_size:(within + 1) * batch_size]


def _batch_tensors(rows: list[Row], pad: int, device: Any) -> dict[str, Any]:
    width = max(len(r.ids) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r.ids)) + r.ids for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r.ids)) + [1] * len(r.ids) for r in rows],
                        device=device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions}


def _forward(model: Any, rows: list[Row], pad: int, *, alora: bool,
             split: bool = True) -> torch.Tensor:
    """Logits predicting each row's answer tokens (rows are left-padded, so every answer ends
    at the last position): ``[batch, longest answer + 1, vocab]`` with the last dropped.

    An aLoRA leaves every token before its invocation to the base weights, so those tokens'
    keys and values do not depend on the adapter and carry no gradient to it. With ``split``
    they run once through the base model without autograd (the cache a check reuses at
    inference), and only the suffix from the earliest invocation on runs through the adapter
    with gradients: the same loss and gradients as the whole sequence through PEFT (a test
    bounds the difference). With logits only at the answer, a SmolLM2 step of 8 short checks
    took half a bare PEFT step's time (``benchmarks/train_throughput.py``); longer
    conversations gain more.
    """
    keep = max(r.answer for r in rows) + 1
    kwargs = _batch_tensors(rows, pad, model.device)
    if not alora:
        return model(**kwargs, logits_to_keep=keep, use_cache=False).logits[:, :-1].float()
    # where the prompt code put the invocation, counted from the end as PEFT does
    offsets = [len(r.ids) - r.shared for r in rows]
    cut = kwargs["input_ids"].shape[1] - max(*offsets, keep)
    if not split or cut <= 0:
        out = model(**kwargs, alora_offsets=offsets, logits_to_keep=keep, use_cache=False)
        return out.logits[:, :-1].float()
    base = model.get_base_model()
    with torch.no_grad():  # the base model's own layers: no adapter acts before an invocation
        head = {k: v[:, :cut] for k, v in kwargs.items()}
        cache = output_cache(base(**head, use_cache=True, logits_to_keep=1))
    out = model(input_ids=kwargs["input_ids"][:, cut:], attention_mask=kwargs["attention_mask"],
                position_ids=kwargs["position_ids"][:, cut:], alora_offsets=offsets,
                logits_to_keep=keep, use_cache=True, **{cache_kwarg_name(base): cache})
    return out.logits[:, :-1].float()


def _margin(at: torch.Tensor, table: Any) -> torch.Tensor:
    """log P(yes) - log P(no) as the fast path reads them: each category's probability is the
    mass of every token that begins it (``intrinsics.scoring.category_tokens``)."""
    first, second = table.ids.values()  # the io.yaml's category order: value 1.0 first
    yes = torch.logsumexp(at[:, first.to(at.device)], dim=-1)
    no = torch.logsumexp(at[:, second.to(at.device)], dim=-1)
    return yes - no


def _loss(logits: torch.Tensor, rows: list[Row], table: Any) -> torch.Tensor:
    """Cross-entropy on the answer tokens, plus the margin the intrinsic reads:
    P(yes) / (P(yes) + P(no)) after the forced prefix, as a logistic loss."""
    width = logits.shape[1]
    targets = torch.full((len(rows), width), -100, dtype=torch.long, device=logits.device)
    starts = []
    for i, r in enumerate(rows):
        targets[i, width - r.answer:] = torch.tensor(r.ids[-r.answer:], device=logits.device)
        starts.append(width - r.answer)
    lm = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                         ignore_index=-100)
    at = logits[torch.arange(len(rows)), torch.tensor(starts)]
    margin = _margin(at, table)
    positive = next(iter(table.ids))
    gold = torch.tensor([float(r.label == positive) for r in rows], device=logits.device)
    return lm + F.binary_cross_entropy_with_logits(margin, gold)


def train_step(model: Any, optimizer: Any, params: list[Any], rows: list[Row], pad: int,
               table: Any, *, alora: bool, split: bool = True) -> float:
    """One optimiser step on ``rows`` (gradients clipped to norm 1); returns the loss.
    ``benchmarks/train_throughput.py`` times exactly this against a bare PEFT loop.

    ``split=False`` with gradient checkpointing: checkpointed layers run their forward again
    in backward, which would append the suffix to the prefix's cache a second time."""
    loss = _loss(_forward(model, rows, pad, alora=alora, split=split), rows, table)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    return loss.item()


@torch.no_grad()
def validation_accuracy(model: Any, rows: list[Row], pad: int, table: Any, *,
                        alora: bool, batch_size: int = 16) -> float | None:
    """The share of rows whose verdict (score > 0.5, the score read after the forced prefix
    as the fast path reads it) matches the label; None without validation rows."""
    if not rows:
        return None
    was_training = model.training
    model.eval()
    right = 0
    for i in range(0, len(rows), batch_size):
        batch = rows[i:i + batch_size]
        logits = _forward(model, batch, pad, alora=alora)
        width = logits.shape[1]
        at = logits[torch.arange(len(batch)), torch.tensor([width - r.answer for r in batch])]
        positive = next(iter(table.ids))
        for r, margin in zip(batch, _margin(at, table).tolist(), strict=True):
            right += int((margin > 0) == (r.label == positive))
    model.train(was_training)
    return right / len(rows)


def lr_at(step: int, total: int, peak: float) -> float:
    """Linear warm-up over the first 5 % of steps, then linear decay to 10 % of the peak."""
    warm = max(1, total // 20)
    if step < warm:
        return peak * (step + 1) / warm
    return peak * (1.0 - 0.9 * (step - warm) / max(1, total - warm))


PEER_DEFAULT_INTRINSIC = "custom-check"


def intrinsic_name(cfg: TrainConfig, peer: bool) -> str:
    if not peer:
        if cfg.intrinsic not in (None, REQUIREMENT_CHECK):
            raise TrainingError(
                f"intrinsic={cfg.intrinsic!r}: check-format data trains {REQUIREMENT_CHECK}; "
                "a custom name is for the peer's item/label rows.")
        return REQUIREMENT_CHECK
    return require_intrinsic_name(cfg.intrinsic or PEER_DEFAULT_INTRINSIC)


def output_dir(cfg: TrainConfig, base: str, intrinsic: str = REQUIREMENT_CHECK) -> Path:
    return Path(cfg.out_root) / intrinsic / base / cfg.kind


def train_adapter(
    cfg: TrainConfig,
    *,
    restart: bool = False,
    on_step: StepHook | None = None,
    progress: Any = None,
) -> TrainingResult:
    """Train, checkpointing every ``cfg.checkpoint_every`` steps; a rerun of the same
    command resumes. ``on_step(step, loss)`` runs after each step (tests interrupt there);
    ``progress``: a ``rich.progress.Progress`` to draw on, or None for silence."""
    cfg.check()
    data = load_training_data(cfg.data, validation=cfg.validation, seed=cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model, tokenizer, base = _load_base(cfg)
    intrinsic = intrinsic_name(cfg, data.peer_format)
    io_path = REQUIREMENT_CHECK_IO_YAML
    if data.peer_format:
        io_dir = Path(tempfile.mkdtemp(prefix="mellea-local-io-"))
        io_path = write_peer_io_yaml(io_dir / "io.yaml", intrinsic, data.labels)
    adapter = adapter_record(tokenizer, cfg.kind, io_path, intrinsic)
    train_rows = build_rows(tokenizer, adapter, data.train, max_length=cfg.max_length)
    val_rows = build_rows(tokenizer, adapter, data.validation, max_length=cfg.max_length)
    answer_ids(tokenizer, adapter)  # refuses an io.yaml or tokenizer training cannot serve
    table = category_tokens(tokenizer, adapter.fast_path)
    if not table.canonical:
        raise TrainingError(
            f"With {base}'s tokenizer the forced prefix {adapter.fast_path.json_prefix!r} does "
            "not end at a token boundary, so checks run by constrained generation, which this "
            "trainer does not model; train on a base whose tokenizer splits it cleanly.")
    # The kind decides what PEFT is told: an aLoRA its invocation, a LoRA None (every token).
    invocation = adapter.strategy.engine_invocation(adapter.invocation_tokens)
    alora = invocation is not None  # rows then carry PEFT's alora_offsets
    steps_per_epoch = math.ceil(len(train_rows) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    if cfg.max_steps is not None:
        total = min(total, cfg.max_steps)
    key = _run_key(cfg, data.sha256, total)
    out = output_dir(cfg, base, intrinsic)
    ckpt = out.parent / f"{cfg.kind}{CHECKPOINT}"
    if restart:
        shutil.rmtree(ckpt, ignore_errors=True)

    from peft import LoraConfig, get_peft_model

    torch.manual_seed(cfg.seed)
    peft_config = LoraConfig(
        r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=0.0,
        target_modules=list(cfg.target_modules), task_type="CAUSAL_LM",
        alora_invocation_tokens=invocation)
    with warnings.catch_warnings():  # PEFT asks transformers a property deprecated in v6
        warnings.filterwarnings("ignore", ".*is_gradient_checkpointing.*", FutureWarning)
        model = get_peft_model(model, peft_config)
    if cfg.gradient_checkpointing:
        with warnings.catch_warnings():  # renamed activation_checkpointing_enable in v6
            warnings.filterwarnings("ignore", ".*gradient_checkpointing_enable.*", FutureWarning)
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    if cfg.init_from:
        start_from(model, Path(cfg.init_from), peft_config)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    state = load_checkpoint(ckpt, model, optimizer, key) or {
        "key": key, "step": 0, "losses": [], "validation": []}
    pad = tokenizer.pad_token_id
    task = None
    if progress is not None:
        task = progress.add_task(f"{cfg.kind} on {base}", total=total,
                                 completed=state["step"], loss=float("nan"))
    started = time.perf_counter()
    model.train()
    for step in range(state["step"], total):
        batch = [train_rows[i]
                 for i in batch_indices(step, len(train_rows), cfg.batch_size, cfg.seed)]
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total, cfg.lr)
        loss = train_step(model, optimizer, params, batch, pad, table, alora=alora,
                          split=not cfg.gradient_checkpointing)
        state["losses"].append(round(loss, 6))
        state["step"] = step + 1
        if (step + 1) % steps_per_epoch == 0 or step + 1 == total:
            acc = validation_accuracy(model, val_rows, pad, table, alora=alora)
            state["validation"].append({"epoch": math.ceil((step + 1) / steps_per_epoch),
                                        "step": step + 1, "accuracy": acc})
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < total:
            save_checkpoint(ckpt, model, optimizer, state)
        if task is not None:
            recent = state["losses"][-10:]
            progress.update(task, advance=1, loss=sum(recent) / len(recent))
        if on_step is not None:
            on_step(step + 1, loss)
    model.eval()
    report = {
        "intrinsic": intrinsic, "kind": cfg.kind, "base_model": base,
        "labels": list(data.labels),
        "data": {"path": str(cfg.data), "sha256": data.sha256, "lines": data.lines,
                 "train_examples": len(train_rows), "validation_examples": len(val_rows)},
        "hyperparameters": {k: v for k, v in asdict(cfg).items()
                            if k not in ("data", "out_root", "device", "threads")},
        "invocation": {"text": adapter.invocation_text,
                       "tokens": list(adapter.invocation_tokens or ())},
        "steps": total, "final_loss": state["losses"][-1] if state["losses"] else None,
        "loss_per_step": state["losses"],
        "validation_accuracy": state["validation"],
        "seconds_this_session": round(time.perf_counter() - started, 1),
        "torch_threads": torch.get_num_threads(), "device": str(model.device),
    }
    _write_adapter(model, out, base, report, io_path)
    shutil.rmtree(ckpt, ignore_errors=True)
    return TrainingResult(out, report)


def start_from(model: Any, folder: Path, peft_config: Any) -> None:
    """Load a trained adapter's weights into the fresh one (``--init-from``): more epochs or
    more data without starting over. Its kind, rank, alpha, target modules and invocation
    must be this run's, or the weights would mean something else; each mismatch is named."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    config_path, weights = folder / "adapter_config.json", folder / "adapter_model.safetensors"
    theirs = json.loads(config_path.read_text(encoding="utf-8"))
    ours = {"r": peft_config.r, "lora_alpha": peft_config.lora_alpha,
            "target_modules": sorted(peft_config.target_modules),
            "alora_invocation_tokens": peft_config.alora_invocation_tokens}
    got = {"r": theirs.get("r"), "lora_alpha": theirs.get("lora_alpha"),
           "target_modules": sorted(theirs.get("target_modules") or []),
           "alora_invocation_tokens": theirs.get("alora_invocation_tokens")}
    differ = [f"{k} {got[k]!r} (this run: {ours[k]!r})" for k in ours if got[k] != ours[k]]
    if differ:
        raise TrainingError(f"--init-from {str(folder)!r} was trained with other settings: "
                            + "; ".join(differ) + ". Pass the same --kind, --rank, --alpha.")
    result = set_peft_model_state_dict(model, load_file(str(weights)))
    missing = [k for k in result.missing_keys if "lora_" in k]
    if missing:
        raise TrainingError(f"--init-from {str(folder)!r} lacks {len(missing)} adapter "
                            f"tensors (e.g. {missing[0]}); it is not this model's adapter.")


def _write_adapter(model: Any, out: Path, base: str, report: dict[str, Any],
                   io_path: Path) -> None:
    """Save in the library layout, replacing an earlier adapter only once the new one is
    complete."""
    tmp = out.with_name(out.name + ".saving")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    (tmp / "README.md").unlink(missing_ok=True)  # PEFT's empty model card
    config_path = tmp / "adapter_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base
    config["target_modules"] = sorted(config.get("target_modules") or [])
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    shutil.copyfile(io_path, tmp / "io.yaml")
    (tmp / REPORT).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    os.rename(tmp, out)
