"""Train the embedded chat model and its requirement-check adapters, reproducibly, on a CPU.

    python scripts/train_embedded.py            # the shipped artifacts (70-125 min, 2 cores)
    python scripts/train_embedded.py --quick    # a 1-2 minute smoke run into /tmp

Three stages, top to bottom:

1. Base: a random-init Llama from ``mellea_local.embedded.build_model`` trained as a language
   model (loss on assistant tokens only) on synthetic chats, ReACT traces and self-checks
   (questions about the form of an answer: the concepts the requirement checks need) and
   word-echo chats, after a short copying warm-up that forms the induction circuit ReACT
   arguments depend on. Beside the LM loss a linear probe on a middle layer learns, at every
   token, the features the checks read (``feature_targets``: word count, all capitals, word in
   the answer, the turn's role, the word's lower-cased identity), and every 4th step a batch of
   look-up drills (``synthetic.mention_drill``) trains the look-up alone; the probe is dropped.
   Every ``self_check_every`` steps the log shows how often the base answers held-out
   self-check questions right (``base_self_check``): a base that missed a concept shows it
   there, long before its adapters are trained. Then ``refine_steps`` more steps with a fresh
   optimiser and probe, a quarter of the drill words place names (``refine_base``). Saved as
   ``mellea_local/embedded/weights/mellea-tiny-chat/``.
2. aLoRA: requirement-check examples rendered into exactly the token ids the intrinsic feeds
   at inference (``build_check_prompts``: conversation, io.yaml instruction turn, the
   invocation spliced in token space, generation prompt) plus the forced ``{"score": "``,
   then ``yes"}``/``no"}`` and end-of-text as targets. Layers from ``adapter_first_layer``
   on only, so the base's own look-up of the requirement's word survives in the layers below.
3. LoRA: the same data and recipe, without invocation tokens.

Adapters go to ``adapters/requirement-check/mellea-tiny-chat/{alora,lora}/`` with io.yaml.

Determinism: every draw comes from a seeded ``random.Random``, the model from a seeded init,
steps are counted (never timed), and torch runs with 2 threads and deterministic algorithms.
Float reductions depend on the thread count, so other thread counts give slightly different
(equally good) weights; ``--threads`` is recorded in training.json. Matmuls run in bfloat16
(``Config.bf16``) through oneDNN, whose kernels follow the CPU's instruction set: a CPU of
another family reproduces its own run byte for byte, not necessarily ours.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from embedded_lab import synthetic as S  # noqa: E402
from embedded_lab.feature_targets import (  # noqa: E402
    CLASSES,
    FEATURES,
    IGNORE,
    feature_targets,
)

from mellea_local.adapters import REQUIREMENT_CHECK_IO_YAML  # noqa: E402
from mellea_local.backends.adapter_registry import Adapter  # noqa: E402
from mellea_local.backends.cache_compat import cache_kwarg_name, new_cache  # noqa: E402
from mellea_local.backends.hf import LocalHFBackend  # noqa: E402
from mellea_local.embedded import build_model, build_tokenizer, save  # noqa: E402
from mellea_local.embedded.factored_embedding import factor_embeddings, materialize  # noqa: E402
from mellea_local.embedded.random_adapter import INVOCATION_TEXT  # noqa: E402
from mellea_local.intrinsics.requirement_check import build_check_prompts  # noqa: E402
from mellea_local.messages import chat_context  # noqa: E402
from mellea_local.training.rows import adapter_record, answer_ids  # noqa: E402
from mellea_local.training.schedule import lr_at  # noqa: E402

BASE_NAME = "mellea-tiny-chat"
WEIGHTS_DIR = ROOT / "mellea_local" / "embedded" / "weights" / BASE_NAME
ADAPTERS_DIR = ROOT / "adapters" / "requirement-check" / BASE_NAME
INTRINSIC = "requirement-check"

Rows = list[tuple[list[int], list[int]]]
"""Token ids and labels (-100 where nothing is learned), one pair per training sequence."""


@dataclass
class Config:
    """The recipe of the shipped run. One line per knob; why each value is what it is (the
    measurements behind it) is in ``scripts/embedded_lab/RECIPE.md``."""

    # base model
    hidden_size: int = 192  # model width
    num_layers: int = 6  # transformer blocks
    num_heads: int = 6  # attention heads
    num_kv_heads: int = 2  # key/value heads (grouped-query attention)
    intermediate_size: int = 512  # MLP width
    base_seed: int = 0  # seeds the model init and the base data
    copy_steps: int = 300  # induction warm-up steps on random-token copying (copy_rows)
    copy_batch: int = 64  # rows per copy batch
    copy_lr: float = 2e-3  # learning rate of the warm-up
    copy_every: int = 4  # then every this-many-th base step is a copy batch (0: none)
    base_steps: int = 7000  # base language-model steps
    base_batch_tokens: int = 2048  # tokens per base batch
    base_lr: float = 3e-3  # peak learning rate of the base (warm-up, then cosine)
    chat_examples: int = 20000  # synthetic.chat_example chats in the base data
    react_examples: int = 2500  # ReACT traces in the base data
    # experiment, off in the shipped run: factored embedding rows (own + word + spelling form)
    factor_embeddings: bool = False
    factor_lr_scale: float = 1.0  # learning rate of the factored rows' shared parts, relative
    self_check_examples: int = 20000  # questions about an answer's form, true Yes./No.
    feature_weight: float = 0.6  # weight of the dense feature-target probe loss (0: no probe)
    feature_layer: int = 4  # hidden state the probe reads
    echo_examples: int = 5000  # "which of these words did you say" chats
    mention_batch: int = 32  # look-up drills (synthetic.mention_drill) after each copy batch
    mention_weight: float = 2.0  # probe-loss weight of the drills
    self_check_questions: int = 1  # families asked about per self-check answer
    self_check_every: int = 1000  # log held-out self-check accuracy every N steps (0: at end)
    refine_steps: int = 1200  # refinement steps after the base (refine_base; 0: none)
    refine_lr: float = 1e-3  # peak learning rate of the refinement
    refine_place_rate: float = 0.25  # share of drill words that are place names meanwhile
    # adapters
    adapter_rank: int = 32  # LoRA rank r
    adapter_alpha: int = 64  # LoRA alpha
    adapter_modules: tuple[str, ...] = (  # projections adapted
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    adapter_first_layer: int = 3  # adapt layers from this one on (0: all)
    adapter_steps: int = 1200  # adapter training steps (each kind)
    adapter_batch: int = 32  # examples per adapter step
    adapter_lr: float = 2e-3  # adapter learning rate
    adapter_pseudo_rate: float = 0.15  # share of made-up words in check examples
    adapter_data_seed: int = 1  # seeds the adapters' data
    adapter_chat_share: float = 0.25  # share of checks of chat answers (not bags of words)
    adapter_mentions_weight: float = 1.0  # "mentions" examples per example of another family
    bf16: bool = True  # bfloat16 matmuls (state stays float32); --set bf16=0: float32 recipe
    threads: int = 2  # torch threads (float reductions depend on it)


QUICK = dict(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256,
             copy_steps=20, base_steps=40, chat_examples=1500, react_examples=150,
             self_check_examples=500, echo_examples=200, feature_layer=1, refine_steps=12,
             adapter_first_layer=1, adapter_steps=40, adapter_rank=8, adapter_alpha=16)


def check_config(cfg: Config) -> None:
    """Refuse a config that would fail mid-run, before minutes of data preparation."""
    if cfg.feature_weight and not 0 <= cfg.feature_layer <= cfg.num_layers:
        raise ValueError(
            f"feature_layer={cfg.feature_layer} names no hidden state of a "
            f"{cfg.num_layers}-layer model (0..{cfg.num_layers}); pass --set feature_layer=N")
    if not 0 <= cfg.adapter_first_layer < cfg.num_layers:
        raise ValueError(
            f"adapter_first_layer={cfg.adapter_first_layer} leaves no layer of a "
            f"{cfg.num_layers}-layer model to adapt (0..{cfg.num_layers - 1}); pass --set "
            "adapter_first_layer=N")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def base_optimizer(model: Any, cfg: Config, factored: Any = None) -> torch.optim.AdamW:
    """AdamW over the base; a factored embedding's shared parts get ``factor_lr_scale``.

    Adam moves every part of a factored row by about the learning rate, so a row can move up
    to three times as far per step as a plain row; the scale damps the shared parts.
    """
    shared = [factored.word, factored.form] if factored is not None else []
    groups: list[dict[str, Any]] = [
        {"params": [p for p in model.parameters() if all(p is not q for q in shared)]}]
    if shared:
        groups.append({"params": shared, "scale": cfg.factor_lr_scale})
    return torch.optim.AdamW(groups, lr=cfg.base_lr, betas=(0.9, 0.95), weight_decay=0.01)


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr * group.get("scale", 1.0)


def set_determinism(threads: int) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)


@contextlib.contextmanager
def train_precision(model: Any, bf16: bool) -> Any:
    """Run a training stage's forwards with bfloat16 matmuls when ``bf16`` (Config.bf16).

    CPU autocast also runs SDPA in bfloat16, whose backward on the CPU is ~5x slower than
    in float32, so the stage uses eager attention (matmuls in bfloat16, softmax in float32,
    as the model computes it) and the model gets its own attention back afterwards. The
    evaluations that run inside a stage turn autocast off: they see float32, as inference does.
    """
    if not bf16:
        yield
        return
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        # No weight cache: autocast keeps its bfloat16 copies of the weights until the
        # outermost region exits, so across optimiser steps a cache would serve stale weights.
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            yield
    finally:
        model.set_attn_implementation(before)


def native_bf16(cpuinfo: str) -> bool:
    """Whether ``/proc/cpuinfo`` text names a bfloat16 instruction set: x86 AVX512-BF16 or
    AMX, or Arm's BF16. Without one, oneDNN emulates bfloat16 matmuls, slower than float32's,
    so the default recipe (Config.bf16) would run longer than the float32 one."""
    return bool({"avx512_bf16", "amx_bf16", "bf16"} & set(cpuinfo.split()))


def warn_if_bf16_is_emulated(cfg: Config) -> None:
    cpuinfo = Path("/proc/cpuinfo")
    if cfg.bf16 and cpuinfo.exists() and not native_bf16(cpuinfo.read_text()):
        log("warning: this CPU has no bfloat16 instructions, so bf16 training runs emulated, "
            "slower than float32; --set bf16=0 trains the float32 recipe (other weights)")


# ----- stage 1: the base model -------------------------------------------------------------------


def render(tok: Any, example: S.ChatExample) -> str:
    return str(tok.apply_chat_template(example.messages, tools=example.tools, tokenize=False))


def encode_chat(
    tok: Any, example: S.ChatExample, text: str | None = None
) -> tuple[list[int], list[int]]:
    """Token ids of the rendered conversation and labels (-100 outside assistant turns).

    An assistant turn is learned from the token after ``<|end_of_role|>`` through its
    ``<|end_of_text|>``; a leading ``<think>`` is not learned: with thinking on, the
    generation prompt writes it, and with thinking off the model must not. With
    ``learned_turns`` only the last that many assistant turns are learned. ``text``: the
    example already rendered.
    """
    text = render(tok, example) if text is None else text
    ids = tok(text, add_special_tokens=False)["input_ids"]
    sor, eor, eos = (tok.convert_tokens_to_ids(t) for t in
                     ("<|start_of_role|>", "<|end_of_role|>", tok.eos_token))
    assistant = tok.encode("assistant", add_special_tokens=False)
    think = tok.convert_tokens_to_ids("<think>")
    labels = [-100] * len(ids)
    i = 0
    starts = [k for k in range(len(ids)) if ids[k] == sor]
    last = starts[-(2 * example.learned_turns - 1)] if example.learned_turns else 0
    while i < len(ids):
        if i >= last and ids[i] == sor and ids[i + 1: i + 1 + len(assistant)] == assistant:
            j = i + 1 + len(assistant)
            assert ids[j] == eor
            j += 1
            if ids[j] == think:
                j += 1
            while j < len(ids):
                labels[j] = ids[j]
                if ids[j] == eos:
                    break
                j += 1
            i = j
        i += 1
    return ids, labels


def length_batches(rows: Rows, budget: int, rng: random.Random) -> list[list[int]]:
    """Indices of rows grouped by similar length so padding stays small; batch order shuffled."""
    order = sorted(range(len(rows)), key=lambda i: (len(rows[i][0]), i))
    batches, current, longest = [], [], 0
    for i in order:
        n = len(rows[i][0])
        if current and max(longest, n) * (len(current) + 1) > budget:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def shared_prefix(rows: Rows) -> int:
    """Tokens every row starts with, stopping before the first position whose next token is
    learned (the prefix's last hidden state must not be needed for a loss)."""
    first = rows[0][0]
    n = len(first)
    for ids, labels in rows:
        k = 0
        while k < min(n, len(ids)) and ids[k] == first[k]:
            k += 1
        learned = next((i for i, t in enumerate(labels) if t != -100), len(labels))
        n = min(k, learned - 1)
    return max(n, 0)


def prefix_batches(
    rows: Rows, groups: list[str | None], budget: int, rng: random.Random,
    group_budget: int | None = None,
) -> list[tuple[list[int], int]]:
    """Batches as ``(row indices, shared prefix length)``, shuffled.

    Rows of one group (ReACT traces offering the same tools) start with the same tool prompt
    (250-330 tokens); batched together, that prefix runs once (see :func:`lm_loss`) instead of
    once per row. Other rows batch by length with no shared prefix. Grouped batches are cut by
    ``group_budget`` (default ``budget``) counted over whole rows, so a larger one buys more
    traces per step for about the cost of an unshared batch.
    """
    batches: list[tuple[list[int], int]] = []
    for key in [None, *sorted({g for g in groups if g is not None})]:
        members = [i for i, g in enumerate(groups) if g == key]
        cut = budget if key is None else (group_budget or budget)
        for batch in length_batches([rows[i] for i in members], cut, rng):
            picked = [members[i] for i in batch]
            shared = 0 if key is None else shared_prefix([rows[i] for i in picked])
            batches.append((picked, shared))
    rng.shuffle(batches)
    return batches


def pad_right(seqs: list[list[int]], value: int) -> torch.Tensor:
    width = max(map(len, seqs))
    return torch.tensor([s + [value] * (width - len(s)) for s in seqs])


def seen_rows(rng: random.Random, n: int, vocab_size: int) -> tuple[Rows, Features]:
    """Random tokens from a small pool, and at every position whether it came before.

    The dense form of what a "mentions" check asks (is this word in that text?): on such rows
    the base learns to match a token against earlier ones in a few hundred steps, while the
    sparse labels of chats and self-checks left it at chance. Only the probe learns here: no
    token is a language-model target.
    """
    rows, features = [], []
    low, high = 4, vocab_size - 5
    mentioned = FEATURES.index("mentioned")
    for _ in range(n):
        pool = rng.sample(range(low, high), rng.randint(8, 40))
        ids = [rng.choice(pool) for _ in range(48)]
        targets = []
        for i, t in enumerate(ids):
            row = [IGNORE] * len(FEATURES)
            row[mentioned] = int(t in ids[:i])
            targets.append(row)
        rows.append((ids, [-100] * len(ids)))
        features.append(targets)
    return rows, features


def mention_rows(rng: random.Random, n: int, tok: Any,
                 place_rate: float = 0.0) -> tuple[Rows, Features]:
    """``synthetic.mention_drill`` chats with the probe's targets only: the balanced,
    case-scrambled form of what a "mentions" check asks, and (through ``words`` and
    ``not_caps`` on answers in mixed case) of what the case and length checks missed."""
    rows, features = [], []
    for _ in range(n):
        ids, targets = feature_targets(tok, render(tok, S.mention_drill(rng, place_rate)))
        rows.append((ids, [-100] * len(ids)))
        features.append(targets)
    return rows, features


def copy_rows(
    rng: random.Random, n: int, vocab_size: int, seps: tuple[int, int]
) -> Rows:
    """Random tokens, a separator, then the same tokens again (loss on the copy).

    Copying is what ReACT needs most (arguments from the goal, answers from tool results),
    and the attention circuit for it forms late from chat data alone: in our runs, 1500 steps
    of mixed data never formed it, while ~250 steps of this dense signal do, after which
    chat-formatted copying is learned within ~100 steps.
    """
    rows = []
    low, high = 4, vocab_size - 5  # skip the control and markup tokens
    for _ in range(n):
        k = rng.randint(3, 12)
        noise = [rng.randint(low, high) for _ in range(rng.randint(0, 10))]
        x = [rng.randint(low, high) for _ in range(k)]
        ids = [*noise, seps[0], *x, seps[1], *x]
        rows.append((ids, [-100] * (len(noise) + k + 2) + x))
    return rows


def copy_separators(tok: Any) -> tuple[int, int]:
    return tok.convert_tokens_to_ids(":"), tok.convert_tokens_to_ids("Ċ")  # ":" and "\n"


Features = list[list[list[int]]]
"""Per row, per token: the ``feature_targets`` of that token."""


def base_rows(cfg: Config, tok: Any) -> tuple[Rows, list[str | None], Features | None]:
    """Encoded base data, per row its prefix group (the offered tools of a ReACT trace), and
    the feature targets when the recipe trains a probe."""
    rng = random.Random(cfg.base_seed)
    examples = [S.chat_example(rng) for _ in range(cfg.chat_examples)]
    examples += [S.self_check_example(rng, cfg.self_check_questions)
                 for _ in range(cfg.self_check_examples)]
    for _ in range(cfg.react_examples):
        task = S.react_task(rng)
        examples.append(S.react_trace(rng, task, thinking=rng.random() < 0.3))
    examples += [S.word_echo_example(rng) for _ in range(cfg.echo_examples)]
    groups = [json.dumps(e.tools, sort_keys=True) if e.tools else None for e in examples]
    texts = [render(tok, e) for e in examples]
    rows = [encode_chat(tok, e, text) for e, text in zip(examples, texts, strict=True)]
    if not cfg.feature_weight:
        return rows, groups, None
    return rows, groups, [feature_targets(tok, text)[1] for text in texts]


@dataclass
class FeatureProbe:
    """A linear read of one hidden layer, trained beside the LM and dropped after."""

    head: torch.nn.Linear
    layer: int
    weight: float
    last_loss: float = 0.0

    def loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean over ``FEATURES`` of each one's cross-entropy where it has a target."""
        logits = self.head(hidden).float().split(list(CLASSES), dim=-1)
        parts = [F.cross_entropy(lg.reshape(-1, lg.shape[-1]), targets[..., k].reshape(-1),
                                 ignore_index=IGNORE)
                 for k, lg in enumerate(logits) if (targets[..., k] != IGNORE).any()]
        return torch.stack(parts).mean() if parts else hidden.new_zeros(())


def lm_loss(model: Any, rows: Rows, pad: int, shared: int = 0,
            probe: FeatureProbe | None = None, features: Features | None = None,
            ) -> torch.Tensor:
    """Next-token loss on the labelled positions of ``rows``, plus the probe's weighted
    feature loss when one is given (``features``: the rows' targets).

    With ``shared`` > 0 every row starts with the same ``shared`` tokens, none of them
    learned: they run once, their K/V are expanded over the batch (a view, so the gradients of
    every row flow back into the one prefix pass) and each row's remainder runs on top. The
    numbers of running every row whole, at a fraction of the cost for long tool prompts.
    """
    rest = [(ids[shared:], labels[shared:]) for ids, labels in rows]
    ids = pad_right([r[0] for r in rest], pad)
    labels = pad_right([r[1] for r in rest], -100)
    mask = pad_right([[1] * len(r[0]) for r in rest], 0)
    kwargs: dict[str, Any] = {}
    if shared:
        cache, kw = new_cache(model), cache_kwarg_name(model)
        model.model(input_ids=torch.tensor([rows[0][0][:shared]]), use_cache=True,
                    **{kw: cache})
        for layer in cache.layers:
            layer.keys = layer.keys.expand(len(rows), -1, -1, -1)
            layer.values = layer.values.expand(len(rows), -1, -1, -1)
        mask = torch.cat([torch.ones(len(rows), shared, dtype=mask.dtype), mask], dim=1)
        positions = torch.arange(shared, shared + ids.shape[1]).expand(len(rows), -1)
        kwargs = {kw: cache, "use_cache": True, "position_ids": positions}
    out = model.model(input_ids=ids, attention_mask=mask, output_hidden_states=probe is not None,
                      **kwargs)
    hidden = out.last_hidden_state
    # Logits only where there is a label: most ReACT tokens are prompt.
    targets = labels[:, 1:]
    keep = targets != -100
    if keep.any():
        logits = model.lm_head(hidden[:, :-1][keep])
        loss = F.cross_entropy(logits.float(), targets[keep])
    else:  # probe-only rows (seen_rows)
        loss = hidden.new_zeros(())
    if probe is None or features is None:
        return loss
    blank = [IGNORE] * len(CLASSES)
    wanted = torch.tensor([f[shared:] + [blank] * (ids.shape[1] - len(f) + shared)
                           for f in features])
    feature_loss = probe.loss(out.hidden_states[probe.layer], wanted)
    probe.last_loss = feature_loss.item()
    return loss + probe.weight * feature_loss


def lm_step(model: Any, opt: Any, rows: Rows, pad: int, shared: int = 0,
            probe: FeatureProbe | None = None, features: Features | None = None) -> float:
    """One optimiser step of :func:`lm_loss`."""
    loss = lm_loss(model, rows, pad, shared, probe, features)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


@dataclass
class BaseData:
    rows: Rows
    batches: list[tuple[list[int], int]]  # row indices and shared-prefix length
    features: Features | None
    tokens: int
    seconds: float  # to build: once per run, shared by the base and refine stages


def base_data(cfg: Config, tok: Any) -> BaseData:
    t0 = time.perf_counter()
    rows, _groups, features = base_rows(cfg, tok)
    rng = random.Random(cfg.base_seed + 1)
    batches = [(b, 0) for b in length_batches(rows, cfg.base_batch_tokens, rng)]
    tokens = sum(len(r[0]) for r in rows)
    seconds = round(time.perf_counter() - t0, 1)
    log(f"base data: {len(rows)} sequences, {tokens} tokens, {len(batches)} batches/epoch "
        f"({seconds:.1f}s)")
    return BaseData(rows, batches, features, tokens, seconds)


def new_probe(cfg: Config, seed: int) -> FeatureProbe:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return FeatureProbe(torch.nn.Linear(cfg.hidden_size, sum(CLASSES)),
                            cfg.feature_layer, cfg.feature_weight)


def base_steps(model: Any, opt: Any, probe: FeatureProbe | None, cfg: Config, tok: Any,
               data: BaseData, *, steps: int, lr: float, seed: int, place_rate: float = 0.0,
               copy_rng: random.Random | None = None, label: str = "base") -> list[float]:
    """``steps`` optimiser steps over the base data, every ``copy_every``-th a copy batch
    followed by the probe-only drills; returns the LM losses of the data steps."""
    pad = tok.pad_token_id
    copy_rng = copy_rng or random.Random(seed + 2)
    mention_rng = random.Random(seed + 5)
    drill = replace(probe, weight=cfg.mention_weight) if probe is not None else None
    seps = copy_separators(tok)
    history: list[float] = []
    taken = 0
    t1 = time.perf_counter()
    for step in range(steps):
        if step and cfg.self_check_every and step % cfg.self_check_every == 0:
            log_self_check(f"{label} after {step} steps", base_self_check(model, tok))
        set_lr(opt, lr_at(step, steps, lr, "cosine"))
        if cfg.copy_every and step % cfg.copy_every == cfg.copy_every - 1:
            lm_step(model, opt, copy_rows(copy_rng, cfg.copy_batch, len(tok), seps), pad)
            if drill is not None and cfg.mention_batch:
                drills, drill_features = mention_rows(mention_rng, cfg.mention_batch, tok,
                                                      place_rate)
                lm_step(model, opt, drills, pad, 0, drill, drill_features)
            continue
        batch, shared = data.batches[taken % len(data.batches)]
        taken += 1
        loss = lm_step(model, opt, [data.rows[i] for i in batch], pad, shared, probe,
                       [data.features[i] for i in batch] if data.features is not None else None)
        history.append(loss)
        if step % 50 == 0 or step == steps - 1:
            recent = sum(history[-25:]) / len(history[-25:])
            probed = f" features {probe.last_loss:.3f}" if probe is not None else ""
            log(f"{label} step {step}/{steps} loss {recent:.3f}{probed} "
                f"({time.perf_counter() - t1:.0f}s)")
    return history


def new_base_model(cfg: Config, tok: Any) -> Any:
    """The random-init base of ``cfg``'s shape, before any training."""
    return build_model(tok, hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
                       num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads,
                       intermediate_size=cfg.intermediate_size, seed=cfg.base_seed)


def train_base(cfg: Config, tok: Any, data: BaseData) -> tuple[Any, dict[str, Any]]:
    t0 = time.perf_counter()
    model = new_base_model(cfg, tok)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"base model: {n_params / 1e6:.2f} M parameters")
    factored = factor_embeddings(model, tok) if cfg.factor_embeddings else None
    if factored is not None:
        log(f"factored embeddings: {len(factored.word)} words x {len(factored.form)} forms")
    model.train()
    opt = base_optimizer(model, cfg, factored)
    probe = None
    if data.features is not None:
        probe = new_probe(cfg, cfg.base_seed + 3)
        opt.add_param_group({"params": list(probe.head.parameters())})
    pad = tok.pad_token_id
    copy_rng = random.Random(cfg.base_seed + 2)
    seps = copy_separators(tok)
    t1 = time.perf_counter()
    with train_precision(model, cfg.bf16):
        for step in range(cfg.copy_steps):
            rows_a = copy_rows(copy_rng, cfg.copy_batch, len(tok), seps)
            set_lr(opt, cfg.copy_lr * min(1.0, (step + 1) / 20))
            loss = lm_step(model, opt, rows_a, pad)
            if step % 50 == 0 or step == cfg.copy_steps - 1:
                log(f"copy warm-up step {step}/{cfg.copy_steps} loss {loss:.3f} "
                    f"({time.perf_counter() - t1:.0f}s)")
        history = base_steps(model, opt, probe, cfg, tok, data, steps=cfg.base_steps,
                             lr=cfg.base_lr, seed=cfg.base_seed, copy_rng=copy_rng)
    materialize(model)
    model.eval()
    self_check = base_self_check(model, tok)
    log_self_check("base", self_check)
    stats = {"parameters": n_params, "sequences": len(data.rows), "tokens": data.tokens,
             "copy_steps": cfg.copy_steps, "steps": cfg.base_steps,
             "final_loss": sum(history[-25:]) / len(history[-25:]),
             "self_check_accuracy": self_check, "data_seconds": data.seconds,
             "seconds": round(time.perf_counter() - t0, 1)}
    return model, stats


def refine_base(cfg: Config, tok: Any, model: Any, data: BaseData) -> dict[str, Any]:
    """``refine_steps`` more steps on a trained base, with a fresh optimiser and probe.

    The look-up "mentions" needs forms late (the self-check saw it at chance until about
    step 3500 of 7000), so a recipe change aimed at it could only be judged after a full run;
    as a stage on a finished base it is judged in minutes, and the stage is the same whether
    the base was trained in this run or loaded (``--base-from``).
    """
    t0 = time.perf_counter()
    model.train()
    opt = base_optimizer(model, cfg)
    probe = None
    if data.features is not None:
        probe = new_probe(cfg, cfg.base_seed + 13)
        opt.add_param_group({"params": list(probe.head.parameters())})
    with train_precision(model, cfg.bf16):
        history = base_steps(model, opt, probe, cfg, tok, data, steps=cfg.refine_steps,
                             lr=cfg.refine_lr, seed=cfg.base_seed + 10,
                             place_rate=cfg.refine_place_rate, label="refine")
    model.eval()
    self_check = base_self_check(model, tok)
    log_self_check("refined base", self_check)
    return {"steps": cfg.refine_steps, "final_loss": sum(history[-25:]) / len(history[-25:]),
            "self_check_accuracy": self_check, "seconds": round(time.perf_counter() - t0, 1)}


SELF_CHECK_SEED = 8_000
"""Held-out self-checks (base data uses ``base_seed``, adapters < 100, eval_embedded 9000+)."""


@torch.no_grad()
@torch.autocast("cpu", enabled=False)
def base_self_check(model: Any, tok: Any, n_per_family: int = 50) -> dict[str, float]:
    """Per family, how often the base's own "Yes"/"No" to a held-out self-check question
    (``synthetic.SELF_CHECK_QUESTIONS``) is right.

    A cheap early read of what the adapters will find: an aLoRA only reads what the base
    computes, and this tracked its held-out accuracy where it mattered (mentions: the stop-16
    base 0.84 / its all-layer aLoRA 89.5 %, refined 0.84-0.88 / 93-95 % from layer 2; a base
    whose look-up failed 0.46 / 50 %, issue 5 notes),
    in seconds and while the base trains, instead of after 20 minutes of adapter training.
    """
    # "Yes." is "Y" "es" ".": the first token decides between the two answers
    yes, no = (tok.encode(w, add_special_tokens=False) for w in ("Yes", "No"))
    assert yes[0] != no[0], "the self-check answers must differ at their first token"
    training = model.training
    model.eval()
    right: dict[str, list[bool]] = {}
    for ex in S.check_examples(random.Random(SELF_CHECK_SEED), n_per_family):
        question = S.SELF_CHECK_QUESTIONS[ex.family][0].format(**ex.slots)
        text = tok.apply_chat_template([*ex.messages, {"role": "user", "content": question}],
                                       add_generation_prompt=True, tokenize=False)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        logits = model(input_ids=torch.tensor([ids]), logits_to_keep=1).logits[0, -1]
        right.setdefault(ex.family, []).append(bool(logits[yes[0]] > logits[no[0]]) == ex.label)
    model.train(training)
    return {f: sum(v) / len(v) for f, v in sorted(right.items())}


def log_self_check(label: str, accuracy: dict[str, float]) -> None:
    log(f"{label} self-check: " + ", ".join(f"{k} {v:.2f}" for k, v in accuracy.items()))


# ----- stages 2 and 3: the adapters ------------------------------------------------------------


def adapter_examples(cfg: Config) -> list[S.CheckExample]:
    """The adapters' training checks: bags of words and chat answers, ``adapter_mentions_weight``
    times as many for "mentions" as for each other family, about ``adapter_steps`` batches."""
    rng = random.Random(cfg.adapter_data_seed)
    n_train = cfg.adapter_steps * cfg.adapter_batch // len(S.FAMILIES) + 1
    n_chat = round(n_train * cfg.adapter_chat_share)
    examples = S.check_examples(rng, n_train - n_chat, pseudo_rate=cfg.adapter_pseudo_rate)
    if n_chat:
        examples += S.chat_check_examples(random.Random(cfg.adapter_data_seed + 2000), n_chat)
    extra = round((cfg.adapter_mentions_weight - 1) * n_train)
    if extra > 0:
        extra_rng = random.Random(cfg.adapter_data_seed + 3000)
        extra_chat = round(extra * cfg.adapter_chat_share)
        examples += S.check_examples(extra_rng, extra - extra_chat,
                                     pseudo_rate=cfg.adapter_pseudo_rate, families=("mentions",))
        examples += [S.chat_check_example(extra_rng, "mentions", i % 2 == 0)
                     for i in range(extra_chat)]
    return examples


@dataclass
class CheckRow:
    ids: list[int]  # prompt + forced JSON prefix + answer tokens + EOS
    shared: int  # aLoRA: tokens before the invocation (base-only); LoRA: 0
    label: bool
    family: str


def check_rows(backend: LocalHFBackend, adapter: Adapter,
               examples: list[S.CheckExample]) -> list[CheckRow]:
    """The exact ids the intrinsic scores, followed by the answer the adapter must give."""
    forced, answers = answer_ids(backend.tokenizer, adapter)
    assert len(answers["yes"]) == len(answers["no"]) == 3
    rows = []
    for ex in examples:
        prompt = build_check_prompts(backend, chat_context(ex.messages), [ex.requirement],
                                     adapter)[0]
        # A LoRA changes every token, so at inference it runs over the whole prompt: only an
        # aLoRA may take the conversation from the base (``prompt.shared`` is the prefix the
        # checks of one batch share, not where an adapter starts).
        shared = prompt.shared if adapter.is_alora else 0
        rows.append(CheckRow(prompt.ids + forced + answers["yes" if ex.label else "no"],
                             shared, ex.label, ex.family))
    return rows


def answer_pair(tok: Any) -> tuple[int, int]:
    """The first answer token of ``yes`` and of ``no``: what the loss and the accuracy compare
    (``training.rows.answer_ids`` owns how answers are tokenized)."""
    _, answers = answer_ids(tok, adapter_record(tok, "lora"))
    return answers["yes"][0], answers["no"][0]


def pad_left(seqs: list[list[int]], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, seqs))
    ids = torch.tensor([[value] * (width - len(s)) + s for s in seqs])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
    return ids, mask


def adapter_logits(model: Any, rows: list[CheckRow], pad: int) -> torch.Tensor:
    """Logits predicting the 3 answer tokens of each row: ``[batch, 3, vocab]``.

    Rows are left-padded, so every answer sits at the same (last) positions and only those
    logits are computed. With ``shared`` > 0 (the aLoRA) the tokens before the invocation run
    through the base model without gradients, as the KV cache serves them at inference, and
    only the rest runs through the adapter: a LoRA applied from the invocation on is exactly
    what an aLoRA computes, without PEFT's per-token masking (half the backward time).
    Explicit position ids keep every real token at the position it has unpadded.
    """
    if not rows[0].shared:
        ids, mask = pad_left([r.ids for r in rows], pad)
        return model(input_ids=ids, attention_mask=mask, logits_to_keep=4).logits[:, :3].float()
    head_ids, head_mask = pad_left([r.ids[: r.shared] for r in rows], pad)
    tail_ids, tail_mask = pad_left([r.ids[r.shared:] for r in rows], pad)
    mask = torch.cat([head_mask, tail_mask], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    width = head_ids.shape[1]
    cache = new_cache(model)
    kw = cache_kwarg_name(model)
    with torch.no_grad(), model.disable_adapter():
        model(input_ids=head_ids, attention_mask=head_mask, position_ids=positions[:, :width],
              use_cache=True, logits_to_keep=1, **{kw: cache})
    out = model(input_ids=tail_ids, attention_mask=mask, position_ids=positions[:, width:],
                use_cache=True, logits_to_keep=4, **{kw: cache})
    return out.logits[:, :3].float()


def lora_config(cfg: Config, base: Any, invocation: list[int] | None = None) -> Any:
    """The adapters' PEFT config; ``invocation`` makes it an aLoRA's."""
    from peft import LoraConfig

    layers = base.config.num_hidden_layers
    return LoraConfig(
        r=cfg.adapter_rank, lora_alpha=cfg.adapter_alpha, lora_dropout=0.0,
        target_modules=list(cfg.adapter_modules), task_type="CAUSAL_LM",
        layers_to_transform=list(range(cfg.adapter_first_layer, layers))
        if cfg.adapter_first_layer else None,
        alora_invocation_tokens=invocation,
    )


def adapter_step(model: Any, opt: Any, params: list[torch.Tensor], batch: list[CheckRow],
                 pad: int, answers: tuple[int, int]) -> float:
    """One optimiser step on a batch of check rows; ``answers``: the "yes" and "no" ids."""
    logits = adapter_logits(model, batch, pad)
    targets = torch.tensor([r.ids[-3:] for r in batch])
    lm = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    # The intrinsic reads P(yes) / (P(yes) + P(no)): train that margin directly too.
    yes, no = answers
    margin = logits[:, 0, yes] - logits[:, 0, no]
    gold = torch.tensor([float(r.label) for r in batch])
    loss = lm + F.binary_cross_entropy_with_logits(margin, gold)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    return loss.item()


def train_adapter(cfg: Config, base: Any, tok: Any, rows: list[CheckRow], *, alora: bool,
                  held_out: list[CheckRow], eval_every: int = 0) -> tuple[Any, dict[str, Any]]:
    from peft import get_peft_model

    t0 = time.perf_counter()
    # Both are trained as plain LoRAs; the aLoRA's rows feed only the tokens from the
    # invocation on through it (see adapter_logits), and it is saved with its invocation.
    torch.manual_seed(cfg.adapter_data_seed + int(alora))
    model = get_peft_model(copy.deepcopy(base), lora_config(cfg, base))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.adapter_lr, weight_decay=0.0)
    yes, no = answer_pair(tok)
    rng = random.Random(cfg.adapter_data_seed + 10)
    order: list[int] = []
    while len(order) < cfg.adapter_steps * cfg.adapter_batch:
        epoch = list(range(len(rows)))
        rng.shuffle(epoch)
        order += epoch
    pad = tok.pad_token_id
    history = []
    model.train()
    with train_precision(model, cfg.bf16):
        for step in range(cfg.adapter_steps):
            start = step * cfg.adapter_batch
            batch = [rows[i] for i in order[start:start + cfg.adapter_batch]]
            for group in opt.param_groups:
                group["lr"] = lr_at(step, cfg.adapter_steps, cfg.adapter_lr, "cosine")
            history.append(adapter_step(model, opt, params, batch, pad, (yes, no)))
            if step % 25 == 0 or step == cfg.adapter_steps - 1:
                recent = sum(history[-25:]) / len(history[-25:])
                log(f"{'aLoRA' if alora else 'LoRA'} step {step}/{cfg.adapter_steps} loss "
                    f"{recent:.3f} ({time.perf_counter() - t0:.0f}s)")
            if eval_every and (step + 1) % eval_every == 0:
                model.eval()
                acc = held_out_accuracy(model, held_out, tok)
                log("  held-out: " + ", ".join(f"{k} {v:.2f}" for k, v in acc.items()))
                model.train()
    model.eval()
    accuracy = held_out_accuracy(model, held_out, tok)
    log(f"{'aLoRA' if alora else 'LoRA'} held-out accuracy (train vocab): "
        + ", ".join(f"{k} {v:.3f}" for k, v in accuracy.items()))
    stats = {"steps": cfg.adapter_steps, "examples": len(rows),
             "final_loss": sum(history[-25:]) / len(history[-25:]),
             "held_out_accuracy": accuracy, "seconds": round(time.perf_counter() - t0, 1)}
    return model, stats


@torch.no_grad()
@torch.autocast("cpu", enabled=False)
def held_out_accuracy(model: Any, rows: list[CheckRow], tok: Any) -> dict[str, float]:
    yes, no = answer_pair(tok)
    right: dict[str, list[bool]] = {}
    for i in range(0, len(rows), 64):
        batch = rows[i: i + 64]
        logits = adapter_logits(model, batch, tok.pad_token_id)
        for r, said_yes in zip(batch, (logits[:, 0, yes] > logits[:, 0, no]).tolist(),
                               strict=True):
            right.setdefault(r.family, []).append(said_yes == r.label)
    return {f: sum(v) / len(v) for f, v in sorted(right.items())}


def tidy_adapter_config(path: Path) -> None:
    """Name the base by its library name and sort the module set, so every run (whatever its
    hash seed, whether the base was trained or loaded) writes the same bytes."""
    config = json.loads(path.read_text())
    config["base_model_name_or_path"] = BASE_NAME
    config["target_modules"] = sorted(config["target_modules"])
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def save_adapter(cfg: Config, model: Any, base: Any, tok: Any, out: Path, *,
                 alora: bool) -> None:
    """Write the adapter folder; an aLoRA gets its invocation tokens in adapter_config.json."""
    from peft import get_peft_model, set_peft_model_state_dict
    from peft.utils import get_peft_model_state_dict

    if alora:
        config = lora_config(
            cfg, base, invocation=tok.encode(INVOCATION_TEXT, add_special_tokens=False))
        trained = get_peft_model_state_dict(model)
        model = get_peft_model(copy.deepcopy(base), config)
        set_peft_model_state_dict(model, trained)
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    (out / "README.md").unlink(missing_ok=True)  # PEFT's empty model card template
    tidy_adapter_config(out / "adapter_config.json")
    shutil.copyfile(REQUIREMENT_CHECK_IO_YAML, out / "io.yaml")


def adopt_base(source: Path, weights: Path, config: dict[str, Any]
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copy a base trained by an earlier run to ``weights`` and merge its training record.

    Adapters are only valid on the base they were trained on, so a run that reuses a base
    ships that base beside them, and its training.json keeps the base's own statistics and
    base-model settings (the ``adapter_*`` settings are this run's): a split run leaves the
    same record as an end-to-end one. Returns the merged config and the base statistics.
    """
    record_file = source / "training.json"
    earlier = json.loads(record_file.read_text()) if record_file.exists() else {}
    if weights.resolve() != source.resolve():
        if weights.exists():
            shutil.rmtree(weights)
        shutil.copytree(source, weights, ignore=shutil.ignore_patterns("training.json"))
        log(f"copied the base from {source} to {weights}")
    earlier_config = earlier.get("config", {})
    base_config = {k: v for k, v in earlier_config.items()
                   if not k.startswith("adapter_") and k != "threads"}
    stats = {**earlier.get("base", {}), "loaded_from": str(source)}
    if "threads" in earlier_config:  # float reductions depend on it: part of reproducing
        stats["threads"] = earlier_config["threads"]
    return {**config, **base_config}, stats


# ----- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a small smoke run (outputs under /tmp unless --out is given)")
    parser.add_argument("--weights", type=Path, default=None, help="base model folder")
    parser.add_argument("--adapters", type=Path, default=None,
                        help="adapter folder (gets alora/ and lora/)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--base-from", type=Path, default=None,
                        help="reuse this trained base instead of training one (copied to "
                        "--weights with its training record, beside the new adapters)")
    parser.add_argument("--kinds", nargs="*", default=["alora", "lora"])
    parser.add_argument("--eval-every", type=int, default=0)
    parser.add_argument("--set", nargs="*", action="extend", default=[], metavar="FIELD=VALUE",
                        help="override Config fields (experiments)")
    args = parser.parse_args(argv)

    cfg = Config(threads=args.threads)
    overrides: dict[str, Any] = dict(QUICK) if args.quick else {}
    for item in args.set:
        key, value = item.split("=", 1)
        default = getattr(cfg, key)
        overrides[key] = (value.lower() in {"1", "true", "yes"} if isinstance(default, bool)
                          else type(default)(value))
    for key, value in overrides.items():
        setattr(cfg, key, value)
    check_config(cfg)
    warn_if_bf16_is_emulated(cfg)
    scratch = Path("/tmp/mellea-embedded-quick")
    weights = args.weights or (scratch / BASE_NAME if args.quick else WEIGHTS_DIR)
    adapters = args.adapters or (scratch / "adapters" if args.quick else ADAPTERS_DIR)
    set_determinism(cfg.threads)
    t0 = time.perf_counter()
    log(f"config: {asdict(cfg)}")

    tok = build_tokenizer()
    config = asdict(cfg)
    data: BaseData | None = None
    if args.base_from:
        from transformers import AutoModelForCausalLM

        base = AutoModelForCausalLM.from_pretrained(args.base_from).eval()
        config, base_stats = adopt_base(args.base_from, weights, config)
    else:
        data = base_data(cfg, tok)
        base, base_stats = train_base(cfg, tok, data)
    refine = bool(cfg.refine_steps) and "refine" not in base_stats
    if refine:
        # the same rows the base trained on: built once (about a minute)
        data = data if data is not None else base_data(cfg, tok)
        base_stats["refine"] = refine_base(cfg, tok, base, data)
        config.update({k: v for k, v in asdict(cfg).items() if k.startswith("refine_")})
    if refine or not args.base_from:
        base.config._name_or_path = BASE_NAME
        if weights.exists():
            shutil.rmtree(weights)
        save(base, tok, weights)
        log(f"saved the base model to {weights}")

    backend = LocalHFBackend.from_loaded(base, tok, model_id=BASE_NAME)
    train_examples = adapter_examples(cfg)
    held_examples = S.check_examples(random.Random(cfg.adapter_data_seed + 1000), 50)
    adapter_stats = {}
    for kind in args.kinds:
        alora = kind == "alora"
        record = adapter_record(tok, kind)
        rows = check_rows(backend, record, train_examples)
        held = check_rows(backend, record, held_examples)
        model, adapter_stats[kind] = train_adapter(cfg, base, tok, rows, alora=alora,
                                                   held_out=held, eval_every=args.eval_every)
        save_adapter(cfg, model, base, tok, adapters / kind, alora=alora)
        log(f"saved the {kind} adapter to {adapters / kind}")

    total = round(time.perf_counter() - t0, 1)
    info = {"base_model": BASE_NAME, "config": config, "base": base_stats,
            "adapters": adapter_stats, "wall_seconds": total,
            "torch": torch.__version__, "threads": cfg.threads}
    (weights / "training.json").write_text(json.dumps(info, indent=2) + "\n")
    log(f"done in {total:.0f}s")


if __name__ == "__main__":
    main()
