"""``train_adapter``: a requirement-check aLoRA (default) or LoRA for any local base model.

PEFT's own aLoRA (``alora_invocation_tokens``), rows built by the inference prompt code
(``rows.py``), a seeded split with validation scores each epoch (the fast path's reading:
P(yes) > P(no) after the forced prefix; balanced accuracy with its 95 % interval and yes/no F1
from ``requirements.metrics``, the user's lines and the replayed general lines apart),
checkpoints that resume exactly and are validated first (``checkpoint.py``), and the result
written in the library layout ``<root>/requirement-check/<base>/<kind>/`` with io.yaml and
``training.json``, so ``backend.add_adapter("requirement-check", roots=[root])`` finds it.

Defaults that make the README's command work for a user's own family: the output goes to the
user's library (``output.user_adapters_root()``), never the shipped one unless named; the run
continues the shipped adapter of the model when there is one (``init_adapter.py``) and mixes in
as many lines of the general data it learned (``datasets.training_path``) as the user gave, so
the new family does not erase the others. A non-finite loss or weight stops the run at that
step (``TrainingDivergedError``), leaving the last good checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
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
from mellea_local.errors import TrainingDataError, TrainingDivergedError, TrainingError
from mellea_local.intrinsics.scoring import category_tokens
from mellea_local.training.checkpoint import FILES as CHECKPOINT_FILES
from mellea_local.training.checkpoint import (
    load_checkpoint,
    remove_checkpoint,
    save_checkpoint,
)
from mellea_local.training.data import REPLAY, USER, TrainingData, add_replay, load_training_data
from mellea_local.training.init_adapter import (
    SCRATCH,
    SHIPPED,
    Shape,
    Start,
    check_invocation,
    choose_start,
    conflicts,
    load_start,
    shape_for,
)
from mellea_local.training.output import (
    ADAPTER_FILES,
    OutputLock,
    check_out_root,
    check_writable,
    fresh_folder,
    fsync_folder,
    make_folders,
    output_error,
    refuse_foreign,
    refuse_link,
    remove_own,
    write_durable,
)
from mellea_local.training.peer_io import peer_io_yaml
from mellea_local.training.rows import Row, adapter_record, answer_ids, build_rows
from mellea_local.training.schedule import lr_at

KINDS = ("alora", "lora")
REPORT = "training.json"
CHECKPOINT = ".checkpoint"


@dataclass
class TrainConfig:
    """Every setting of a run (all of them, except device and threads, key its checkpoint).

    ``None`` for ``rank``, ``alpha`` and ``target_modules`` means: the adapter the run starts
    from decides (its ``adapter_config.json``), else 32, 32 and q/k/v. ``out_root`` None is the
    user's library (``output.user_adapters_root()``). ``replay_ratio`` None is 1.0 when the run
    continues the shipped adapter and the model's general data is shipped, else 0.
    """

    data: str
    model: str = "embedded"
    kind: str = "alora"
    out_root: str | None = None
    intrinsic: str | None = None  # peer-format data: the custom intrinsic's name
    epochs: int = 3
    max_steps: int | None = None
    batch_size: int = 8
    lr: float = 1e-3  # SmolLM2 r=32 aLoRA at 1e-3 first passed 0.8 validation at epoch 2 of 3
    rank: int | None = None
    alpha: int | None = None
    target_modules: tuple[str, ...] | None = None
    validation: float = 0.2
    seed: int = 0
    max_length: int = 1024
    gradient_checkpointing: bool = False
    checkpoint_every: int = 25
    init_from: str | None = None  # a trained adapter folder to continue
    from_scratch: bool = False  # do not continue the shipped adapter
    replay_ratio: float | None = None  # general lines per user line
    device: str | None = field(default=None, metadata={"key": False})
    dtype: str | None = None
    threads: int | None = field(default=None, metadata={"key": False})

    def check(self) -> None:
        if self.kind not in KINDS:
            raise TrainingError(f"kind={self.kind!r}; use alora (default) or lora.")
        for name in ("epochs", "batch_size", "max_length", "checkpoint_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TrainingError(f"{name}={value!r} must be a whole number >= 1.")
        for name in ("rank", "alpha", "max_steps"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise TrainingError(f"{name}={value!r} must be a whole number >= 1 (or None).")
        if not (isinstance(self.lr, float | int) and 0 < self.lr < 1):
            raise TrainingError(f"lr={self.lr!r} must be a learning rate in (0, 1).")
        if self.target_modules is not None and (
                isinstance(self.target_modules, str) or not self.target_modules
                or not all(isinstance(m, str) and m.strip() for m in self.target_modules)):
            raise TrainingError(
                f"target_modules={self.target_modules!r}: pass module names, e.g. "
                "q_proj,k_proj,v_proj (or leave it out).")
        if self.replay_ratio is not None and (
                isinstance(self.replay_ratio, bool)
                or not isinstance(self.replay_ratio, float | int)
                or not math.isfinite(self.replay_ratio) or not 0 <= self.replay_ratio <= 10):
            raise TrainingError(
                f"replay_ratio={self.replay_ratio!r}: pass general lines per line of yours, "
                "from 0 (no replay) to 10.")
        if self.init_from is not None and self.from_scratch:
            raise TrainingError("--init-from and --from-scratch contradict each other; pass "
                                "one.")
        if self.init_from is not None and not all(
                (Path(self.init_from).expanduser() / name).is_file()
                for name in ("adapter_config.json", "adapter_model.safetensors")):
            raise TrainingError(
                f"--init-from {self.init_from!r}: not an adapter folder (it needs "
                "adapter_config.json and adapter_model.safetensors).")
        if self.threads is not None:
            from mellea_local.threads import check_threads

            check_threads(self.threads)  # bounded by the usable CPUs, before any thread


@dataclass
class TrainingResult:
    path: Path
    report: dict[str, Any]


StepHook = Callable[[int, float], None]


def _run_key(cfg: TrainConfig, data: TrainingData, total: int, start: Start,
             shape: Shape) -> str:
    """Everything that changes the trajectory: the settings as resolved (the start's rank,
    not ``None``), the data and replay hashes, the weights started from."""
    keyed = {k: v for k, v in asdict(cfg).items()
             if k not in ("device", "threads", "out_root", "data", "model", "init_from",
                          "from_scratch", "rank", "alpha", "target_modules")}
    keyed.update(data_sha256=data.sha256, total_steps=total, model=os.path.basename(
        os.path.normpath(cfg.model)), shape=asdict(shape), start=start.sha256,
        replay=asdict(data.replay) if data.replay else None)
    keyed.pop("replay_ratio", None)
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()


def _model_source(cfg: TrainConfig) -> tuple[str, str]:
    """The model folder to load and its base name (the library folder), without loading."""
    from mellea_local.backends.loading import resolve_model_source

    if cfg.model == "embedded":
        from mellea_local.embedded import trained_weights_dir

        source = str(trained_weights_dir())
    else:
        source = resolve_model_source(cfg.model)
    return source, Path(source.rstrip("/")).name


def _load_base(cfg: TrainConfig, source: str | None = None) -> tuple[Any, Any, str]:
    from mellea_local.backends.loading import load_pretrained, resolve_device, resolve_dtype

    if source is None:
        source, _ = _model_source(cfg)
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
               table: Any, *, alora: bool, split: bool = True, step: int | None = None) -> float:
    """One optimiser step on ``rows`` (gradients clipped to norm 1); returns the loss.
    ``benchmarks/train_throughput.py`` times exactly this against a bare PEFT loop.

    A non-finite loss stops before the optimiser touches the weights, and weights that turn
    non-finite in the step stop the run: ``TrainingDivergedError`` naming ``step`` (1-based).

    ``split=False`` with gradient checkpointing: checkpointed layers run their forward again
    in backward, which would append the suffix to the prefix's cache a second time."""
    loss = _loss(_forward(model, rows, pad, alora=alora, split=split), rows, table)
    where = f"step {step}" if step is not None else "this step"
    if not torch.isfinite(loss):
        raise TrainingDivergedError(
            f"The loss became {loss.item()} at {where} (lines "
            f"{sorted({r.line for r in rows})[:8]}); training stopped, the last good "
            "checkpoint is kept and no adapter was written. Lower --lr, or check the start "
            "adapter (--init-from / --from-scratch).", step or 0)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    with torch.no_grad():
        bad = next((p for p in params if not torch.isfinite(p).all()), None)
    if bad is not None:
        raise TrainingDivergedError(
            f"A trainable weight became NaN or infinite at {where}; training stopped, the last "
            "good checkpoint is kept and no adapter was written. Lower --lr.", step or 0)
    return loss.item()


@torch.no_grad()
def validation_predictions(model: Any, rows: list[Row], pad: int, table: Any, *,
                           alora: bool, batch_size: int = 16) -> list[bool]:
    """Each row's verdict (score > 0.5: P(first category) > P(second), read after the forced
    prefix as the fast path reads it)."""
    was_training = model.training
    model.eval()
    verdicts: list[bool] = []
    for i in range(0, len(rows), batch_size):
        batch = rows[i:i + batch_size]
        logits = _forward(model, batch, pad, alora=alora)
        width = logits.shape[1]
        at = logits[torch.arange(len(batch)), torch.tensor([width - r.answer for r in batch])]
        verdicts.extend(margin > 0 for margin in _margin(at, table).tolist())
    model.train(was_training)
    return verdicts


def validation_accuracy(model: Any, rows: list[Row], pad: int, table: Any, *,
                        alora: bool, batch_size: int = 16) -> float | None:
    """The share of rows whose verdict matches the label; None without validation rows."""
    if not rows:
        return None
    positive = next(iter(table.ids))
    verdicts = validation_predictions(model, rows, pad, table, alora=alora,
                                      batch_size=batch_size)
    return sum(v == (r.label == positive) for r, v in zip(rows, verdicts, strict=True)) \
        / len(rows)


def scores_by_origin(rows: list[Row], verdicts: list[bool], positive: str
                     ) -> dict[str, Any]:
    """``requirements.metrics.binary_scores`` of all validation rows, the user's and the
    replayed ones apart (None where a group has no row), and the replayed ones per family
    (``replay_by_family``, when the general data names its families)."""
    from mellea_local.requirements.metrics import binary_scores

    out: dict[str, Any] = {}
    for group in ("all", USER, REPLAY):
        pairs = [(r.label == positive, v) for r, v in zip(rows, verdicts, strict=True)
                 if group == "all" or r.origin == group]
        if not pairs:
            out[group] = None
            continue
        scores = binary_scores([y for y, _ in pairs], [v for _, v in pairs])
        out[group] = {**scores.as_dict(), "describe": scores.describe()}
    families = sorted({r.family for r in rows if r.origin == REPLAY and r.family})
    by_family: dict[str, Any] = {}
    for family in families:
        pairs = [(r.label == positive, v) for r, v in zip(rows, verdicts, strict=True)
                 if r.origin == REPLAY and r.family == family]
        scores = binary_scores([y for y, _ in pairs], [v for _, v in pairs])
        by_family[family] = {**scores.as_dict(), "describe": scores.describe()}
    out["replay_by_family"] = by_family or None
    return out


PEER_DEFAULT_INTRINSIC = "custom-check"


def intrinsic_name(cfg: TrainConfig, peer: bool) -> str:
    if not peer:
        if cfg.intrinsic not in (None, REQUIREMENT_CHECK):
            raise TrainingError(
                f"intrinsic={cfg.intrinsic!r}: check-format data trains {REQUIREMENT_CHECK}; "
                "a custom name is for the peer's item/label rows.")
        return REQUIREMENT_CHECK
    return require_intrinsic_name(cfg.intrinsic or PEER_DEFAULT_INTRINSIC)


def output_dir(out_root: Path, base: str, kind: str, intrinsic: str = REQUIREMENT_CHECK
               ) -> Path:
    return out_root / intrinsic / base / kind


Say = Callable[[str], None]


def train_adapter(
    cfg: TrainConfig,
    *,
    restart: bool = False,
    on_step: StepHook | None = None,
    progress: Any = None,
    say: Say | None = None,
) -> TrainingResult:
    """Train, checkpointing every ``cfg.checkpoint_every`` steps; a rerun of the same
    command resumes. ``on_step(step, loss)`` runs after each step (tests interrupt there);
    ``progress``: a ``rich.progress.Progress`` to draw on, or None for silence; ``say(line)``
    receives what a user must know before the first step (where the output goes, what the
    run starts from, the replay, dropped duplicates), each also kept in the report's
    ``notes``."""
    notes: list[str] = []

    def note(line: str) -> None:
        notes.append(line)
        if say is not None:
            say(line)

    cfg.check()
    data = load_training_data(cfg.data, validation=cfg.validation, seed=cfg.seed)
    if data.duplicates:
        note(f"dropped {data.duplicates} duplicate check(s) of {cfg.data} (the same "
             "conversation and requirement with the same label); each is trained once")
    source, base = _model_source(cfg)
    intrinsic = intrinsic_name(cfg, data.peer_format)
    out_root = check_out_root(cfg.out_root, named=cfg.out_root is not None)
    start = choose_start(cfg.init_from, cfg.from_scratch, intrinsic, base, cfg.kind,
                         shipped_ok=not data.peer_format)
    differ = conflicts(start, cfg.rank, cfg.alpha, cfg.target_modules)
    if start.source == SHIPPED and differ:
        note(f"not continuing the shipped adapter {start.path}: it has "
             + "; ".join(differ) + ". Training a fresh adapter; leave those flags out to "
             "continue it")
        start = Start(SCRATCH)
    shape = shape_for(start, cfg.rank, cfg.alpha, cfg.target_modules)
    note(start.describe())
    data = _with_replay(cfg, data, intrinsic, base, start, note)
    folder = make_folders(out_root, intrinsic, base)
    out = folder / cfg.kind
    ckpt = folder / f"{cfg.kind}{CHECKPOINT}"
    refuse_link(out, "the adapter folder")
    refuse_link(ckpt, "the checkpoint folder")
    for folder_ in (ckpt, ckpt.with_name(ckpt.name + ".old")):
        refuse_foreign(folder_, CHECKPOINT_FILES, "a checkpoint folder")
    with OutputLock(folder, f"{cfg.kind}.lock", {"data": str(cfg.data)}):
        check_writable(folder)
        note(f"writing to {out}")
        if restart:
            remove_checkpoint(ckpt)
        return _train(cfg, data, source, base, intrinsic, start, shape, out, ckpt, notes,
                      on_step=on_step, progress=progress)


def _with_replay(cfg: TrainConfig, data: TrainingData, intrinsic: str, base: str,
                 start: Start, note: Say) -> TrainingData:
    from mellea_local.datasets import training_path

    if data.peer_format:
        return data
    general = training_path(intrinsic, base)
    ratio = cfg.replay_ratio
    if ratio is None:
        if start.source != SHIPPED:
            return data
        if not general.is_file():
            note(f"no general training data is shipped for {base} ({general}); no replay")
            return data
        ratio = 1.0
    if ratio == 0:
        return data
    if not general.is_file():
        raise TrainingDataError(
            f"--replay-ratio {ratio}: no general training data is shipped for {base} (looked "
            f"for {general}); pass --replay-ratio 0.")
    data = add_replay(data, general, ratio=ratio, validation=cfg.validation, seed=cfg.seed)
    info = data.replay
    assert info is not None
    note(f"replaying {info.train + info.validation} general line(s) of {general} beside yours "
         f"(--replay-ratio {ratio:g}; {info.validation} for validation) so the other families "
         "are not forgotten; --replay-ratio 0 turns it off")
    return data


def _train(cfg: TrainConfig, data: TrainingData, source: str, base: str, intrinsic: str,
           start: Start, shape: Shape, out: Path, ckpt: Path, notes: list[str], *,
           on_step: StepHook | None, progress: Any) -> TrainingResult:
    if cfg.threads:
        from mellea_local.threads import apply_threads

        apply_threads(cfg.threads, warn=False)
    model, tokenizer, _ = _load_base(cfg, source)
    io_text = REQUIREMENT_CHECK_IO_YAML.read_text(encoding="utf-8")
    io_path = REQUIREMENT_CHECK_IO_YAML
    if data.peer_format:
        io_text = peer_io_yaml(intrinsic, data.labels)
        io_path = Path(tempfile.mkdtemp(prefix="mellea-local-io-")) / "io.yaml"
        io_path.write_text(io_text, encoding="utf-8")
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
    check_invocation(start, invocation)
    alora = invocation is not None  # rows then carry PEFT's alora_offsets
    steps_per_epoch = math.ceil(len(train_rows) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    if cfg.max_steps is not None:
        total = min(total, cfg.max_steps)
    key = _run_key(cfg, data, total, start, shape)

    from peft import LoraConfig, get_peft_model

    torch.manual_seed(cfg.seed)
    peft_config = LoraConfig(
        r=shape.rank, lora_alpha=shape.alpha, lora_dropout=0.0,
        target_modules=list(shape.target_modules), task_type="CAUSAL_LM",
        layers_to_transform=list(shape.layers) if shape.layers else None,
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
    load_start(model, start)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    state = load_checkpoint(ckpt, model, optimizer, key, total) or {
        "key": key, "step": 0, "losses": [], "validation": []}
    pad = tokenizer.pad_token_id
    positive = next(iter(table.ids))
    task = None
    if progress is not None:
        task = progress.add_task(f"{cfg.kind} on {base}", total=total,
                                 completed=state["step"], loss=float("nan"))
    started = time.perf_counter()
    verdicts: list[bool] | None = None
    model.train()
    for step in range(state["step"], total):
        batch = [train_rows[i]
                 for i in batch_indices(step, len(train_rows), cfg.batch_size, cfg.seed)]
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total, cfg.lr)
        loss = train_step(model, optimizer, params, batch, pad, table, alora=alora,
                          split=not cfg.gradient_checkpointing, step=step + 1)
        state["losses"].append(round(loss, 6))
        state["step"] = step + 1
        if (step + 1) % steps_per_epoch == 0 or step + 1 == total:
            entry: dict[str, Any] = {"epoch": math.ceil((step + 1) / steps_per_epoch),
                                     "step": step + 1, "accuracy": None,
                                     "balanced_accuracy": None}
            if val_rows:
                verdicts = validation_predictions(model, val_rows, pad, table, alora=alora)
                groups = scores_by_origin(val_rows, verdicts, positive)
                assert groups["all"] is not None
                entry.update(accuracy=groups["all"]["accuracy"],
                             balanced_accuracy=groups["all"]["balanced_accuracy"])
            state["validation"].append(entry)
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < total:
            save_checkpoint(ckpt, model, optimizer, state)
        if task is not None:
            recent = state["losses"][-10:]
            progress.update(task, advance=1, loss=sum(recent) / len(recent))
        if on_step is not None:
            on_step(step + 1, loss)
    model.eval()
    if verdicts is None and val_rows:
        verdicts = validation_predictions(model, val_rows, pad, table, alora=alora)
    validation = scores_by_origin(val_rows, verdicts or [], positive) if val_rows else {
        "all": None, USER: None, REPLAY: None, "replay_by_family": None}
    report = {
        "intrinsic": intrinsic, "kind": cfg.kind, "base_model": base,
        "labels": list(data.labels),
        "data": {"path": str(cfg.data), "sha256": data.sha256, "lines": data.lines,
                 "duplicates_dropped": data.duplicates,
                 "train_examples": len(train_rows), "validation_examples": len(val_rows),
                 "user_train_examples": sum(r.origin == USER for r in train_rows),
                 "user_validation_examples": sum(r.origin == USER for r in val_rows)},
        "replay": asdict(data.replay) if data.replay else None,
        "start": {"source": start.source, "path": str(start.path) if start.path else None,
                  "sha256": start.sha256},
        "hyperparameters": {**{k: v for k, v in asdict(cfg).items()
                               if k not in ("data", "out_root", "device", "threads")},
                            "rank": shape.rank, "alpha": shape.alpha,
                            "target_modules": list(shape.target_modules),
                            "layers_to_transform": list(shape.layers) if shape.layers else None},
        "invocation": {"text": adapter.invocation_text,
                       "tokens": list(adapter.invocation_tokens or ())},
        "steps": total, "final_loss": state["losses"][-1] if state["losses"] else None,
        "loss_per_step": state["losses"],
        "validation_accuracy": state["validation"],
        "validation": validation,
        "seconds_this_session": round(time.perf_counter() - started, 1),
        "torch_threads": torch.get_num_threads(), "device": str(model.device),
        "notes": notes,
    }
    _write_adapter(model, out, base, report, io_text)
    remove_checkpoint(ckpt)
    return TrainingResult(out, report)


def _adapter_files(model: Any, base: str, report: dict[str, Any], io_text: str
                   ) -> dict[str, bytes]:
    """The adapter folder's files, serialised in memory (so a full disk is an ``OSError`` of
    ours naming the file, never a writer's raw error): the weights as PEFT saves them, the
    config PEFT would write (inference mode, sorted modules, the base's library name)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save

    state = {k: v.detach().cpu().contiguous().clone()
             for k, v in get_peft_model_state_dict(model).items()}
    config = model.peft_config["default"].to_dict()
    config = {k: (sorted(v) if isinstance(v, set) else v) for k, v in config.items()}
    config.update(inference_mode=True, base_model_name_or_path=base,
                  target_modules=sorted(config.get("target_modules") or []))
    return {
        "adapter_model.safetensors": save(state, metadata={"format": "pt"}),
        "adapter_config.json": (json.dumps(config, indent=2, sort_keys=True) + "\n").encode(),
        "io.yaml": io_text.encode("utf-8"),
        "training.json": (json.dumps(report, indent=1) + "\n").encode(),
    }


def _write_adapter(model: Any, out: Path, base: str, report: dict[str, Any],
                   io_text: str) -> None:
    """Write the adapter into ``out``: every file to a fresh temporary folder first (fsynced),
    then renamed into place. A new ``out`` is one rename; into an existing folder each of
    training's files replaces its own name, and any other file the user keeps there stays."""
    files = _adapter_files(model, base, report, io_text)
    refuse_link(out, "the adapter folder")
    tmp = fresh_folder(out.parent, f".{out.name}.saving-")
    try:
        for name, data in files.items():
            write_durable(tmp, name, data, final=out)
        fsync_folder(tmp)
        if not out.exists():
            os.rename(tmp, out)
        else:
            if not out.is_dir():
                raise TrainingError(f"{out} exists and is not a folder; move it away.")
            for name in ADAPTER_FILES:  # the report last: it marks the folder complete
                os.replace(tmp / name, out / name)
        fsync_folder(out)
        fsync_folder(out.parent)
    except OSError as exc:
        raise output_error(exc, out, "write the adapter") from None
    finally:
        remove_own(tmp, ADAPTER_FILES)
