"""The baseline an adapter must beat: the same base model asked, as a judge, the question a user
would otherwise write.

Without a requirement-check adapter, a user of the peer library (mellea) validates a requirement
with LLM-as-a-judge: the peer's ``Requirement.validate`` appends one user turn rendered from its
default ``Requirement`` prompt template (a short instruction: check the requirement against the
output, reply 'yes' if it is satisfied and 'no' otherwise, no other text; then the output and
the requirement, each on its own labelled line) to the conversation being judged, generates a
reply with the base model through the normal chat template, and reads it with
``default_output_to_bool`` ("yes"/"y" alone, or the word "yes" anywhere in the reply, counts as
satisfied; anything else as not). This package carries the same prompt and reader
(``LLMaJRequirement.judge_prompt`` and ``default_output_to_bool``), so the ``greedy`` variant
here simply validates an ``LLMaJRequirement``: the base model with no adapter active, greedy
decoding, ``max_new_tokens`` tokens, exactly the call a user's code makes.

A small model often answers "Yes" to everything, so the greedy variant alone would flatter the
adapter. The ``probability`` variant gives the judge its best fair chance: the same rendered
prompt, one forward of the base model, and the verdict ``P(yes) > P(no)`` over the first answer
token, where P(yes) sums every single-token spelling of "yes" (yes, Yes, YES, with and without a
leading space) and P(no) likewise. Both are reported beside the adapters; neither is tuned on
the data it is scored on (no threshold is fitted).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import torch

from mellea_local.bench.accuracy import LabelledItem, adapter_accuracy, context_of
from mellea_local.bench.timing import Tick
from mellea_local.errors import BenchConfigError, BenchmarkError
from mellea_local.messages import Message
from mellea_local.options import ModelOption

JUDGE_NEW_TOKENS = 16
"""Tokens the greedy judge may write: a yes/no with a short clause; the reader looks for the
word "yes" anywhere in them, and a reply that starts "No" is read as no however it goes on."""

VARIANTS = ("greedy", "probability")
"""The judge rows of an accuracy result, as named in ``judge_name``."""

_ANSWERS = {"yes": ("yes", "Yes", "YES"), "no": ("no", "No", "NO")}


def judge_name(variant: str) -> str:
    """The row name of a judge variant in an accuracy result's ``adapters``."""
    return f"judge ({variant})"


@dataclass(frozen=True)
class JudgeVerdict:
    """One requirement judged both ways: the greedy reply as read, and the first-token odds."""

    text: str
    """The greedy reply, as the model wrote it."""
    greedy: bool
    """``text`` read with ``default_output_to_bool``, as the peer reads a judge."""
    p_yes: float
    p_no: float
    """Probability mass on the first answer token's yes and no spellings."""
    top_token: int
    """The most likely first answer token (what greedy decoding picks)."""

    @property
    def probability(self) -> bool:
        """The ``probability`` variant's verdict: yes more likely than no."""
        return self.p_yes > self.p_no


def answer_tokens(tokenizer: Any) -> tuple[list[int], list[int]]:
    """(yes ids, no ids): the single-token spellings of each answer in ``tokenizer``.

    A spelling the tokenizer splits into several tokens is left out: its first piece (e.g.
    "Y") is not an answer on its own. A tokenizer with no single-token yes or no cannot be
    read this way, which is said instead of scoring a judge on nothing.
    """
    found: dict[str, list[int]] = {}
    for answer, spellings in _ANSWERS.items():
        ids: list[int] = []
        for spelling in spellings:
            for text in (spelling, " " + spelling):
                pieces = tokenizer.encode(text, add_special_tokens=False)
                if len(pieces) == 1 and pieces[0] not in ids:
                    ids.append(pieces[0])
        found[answer] = ids
    if not found["yes"] or not found["no"]:
        raise BenchmarkError(
            f"The tokenizer {type(tokenizer).__name__} spells neither 'yes' nor 'no' as one "
            "token, so the probability judge cannot read a first-token answer; score only the "
            "greedy judge (its reply is read as text).")
    return found["yes"], found["no"]


def _require_local_model(backend: Any) -> None:
    if getattr(backend, "engine", None) is None or not hasattr(backend, "render"):
        raise BenchConfigError(
            f"The probability judge reads the base model's logits, which a "
            f"{type(backend).__name__} does not expose; benchmark the judge on a local "
            "transformers backend (LocalHFBackend, `bench --model`).")


def base_next_logits(backend: Any, ids: list[int]) -> torch.Tensor:
    """Next-token logits of the base model after ``ids``, every adapter off (float32)."""
    engine = backend.engine
    with engine.lock, torch.inference_mode():
        engine.holder.assert_base()  # adapter layers are off outside a check's own call
        out = engine.model(input_ids=torch.tensor([ids], device=backend.device))
    return out.logits[0, -1].float().cpu()


async def ajudge(
    backend: Any, messages: list[dict[str, Any]], requirement: str, *,
    answers: tuple[list[int], list[int]] | None = None,
    max_new_tokens: int = JUDGE_NEW_TOKENS,
) -> JudgeVerdict:
    """Judge ``requirement`` on the last assistant turn of ``messages`` both ways."""
    from mellea_local.requirements.requirement import LLMaJRequirement

    _require_local_model(backend)
    yes_ids, no_ids = answers or answer_tokens(backend.tokenizer)
    ctx = context_of(messages)
    req = LLMaJRequirement(requirement)
    result = await req.validate(backend, ctx,
                                model_options={ModelOption.MAX_NEW_TOKENS: max_new_tokens})
    text = "" if result.thunk is None else str(result.thunk.value or "")
    # The same user turn the greedy call rendered, read once by the bare model.
    question = Message("user", req.judge_prompt(messages[-1]["content"]))
    ids, _, _ = backend.render(question, ctx)
    logits = await asyncio.to_thread(base_next_logits, backend, ids)
    probs = torch.softmax(logits, dim=-1)
    return JudgeVerdict(text=text, greedy=result.as_bool(),
                        p_yes=float(probs[yes_ids].sum()), p_no=float(probs[no_ids].sum()),
                        top_token=int(logits.argmax()))


async def ajudge_items(
    backend: Any, items: list[LabelledItem], *, max_new_tokens: int = JUDGE_NEW_TOKENS,
    tick: Tick | None = None,
) -> tuple[list[list[JudgeVerdict]], float]:
    """Every requirement of every ``LabelledItem`` judged; (verdicts per item, seconds)."""
    _require_local_model(backend)
    answers = answer_tokens(backend.tokenizer)
    t0 = time.perf_counter()
    out = []
    for item in items:
        out.append([await ajudge(backend, item.messages, req, answers=answers,
                                 max_new_tokens=max_new_tokens) for req in item.requirements])
        if tick:
            tick()
    return out, time.perf_counter() - t0


def judge_rows(
    items: list[LabelledItem], families: list[str], verdicts: list[list[JudgeVerdict]],
    seconds: float, *, max_new_tokens: int = JUDGE_NEW_TOKENS,
) -> dict[str, dict[str, Any]]:
    """The judge's rows for an accuracy result, one per variant, shaped like an adapter's.

    Each row also says how the model answered: the share of greedy replies read as yes, and
    the mean probability mass the first token put on any yes/no spelling (low mass: the model
    mostly starts its reply some other way, and the probability verdict rests on little).
    ``ms_per_check`` is the time of both variants together.
    """
    flat = [v for row in verdicts for v in row]
    n = len(flat)
    rows = {}
    for variant in VARIANTS:
        picked = [[v.greedy if variant == "greedy" else v.probability for v in row]
                  for row in verdicts]
        row = adapter_accuracy(items, families, "judge", picked, seconds)
        row["variant"] = variant
        row["said_yes"] = sum(sum(r) for r in picked) / n if n else None
        rows[judge_name(variant)] = row
    rows[judge_name("greedy")]["max_new_tokens"] = max_new_tokens
    rows[judge_name("probability")]["mean_answer_mass"] = (
        sum(v.p_yes + v.p_no for v in flat) / n if n else None)
    return rows


def points_vs_judge(acc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each adapter's balanced accuracy minus each judge variant's, in points, per family and
    overall.

    ``{adapter: {variant: {"families": {family: points}, "overall": points}}}``; a cell where
    either balanced accuracy is undefined (one label only) gets None. Whether a cell is too
    small to mean anything is the cells' own ``too_small``, which a report shows instead of
    the points.
    """
    def diff(a: dict[str, Any], b: dict[str, Any]) -> float | None:
        if a["balanced_accuracy"] is None or b["balanced_accuracy"] is None:
            return None
        return round(100 * (a["balanced_accuracy"] - b["balanced_accuracy"]), 2)

    rows = acc["adapters"]
    judges = [name for name in rows if rows[name]["kind"] == "judge"]
    out: dict[str, dict[str, Any]] = {}
    for name, row in rows.items():
        if row["kind"] == "judge":
            continue
        out[name] = {
            rows[j]["variant"]: {
                "families": {f: diff(row["families"][f], rows[j]["families"][f])
                             for f in acc["families"]},
                "overall": diff(row["overall"], rows[j]["overall"]),
            } for j in judges}
    return out


async def aadd_judge(
    backend: Any, items: list[LabelledItem], acc: dict[str, Any], *,
    max_new_tokens: int = JUDGE_NEW_TOKENS, tick: Tick | None = None,
) -> dict[str, Any]:
    """Add the judge rows and ``vs_judge`` (``points_vs_judge``) to an accuracy result."""
    verdicts, seconds = await ajudge_items(backend, items, max_new_tokens=max_new_tokens,
                                           tick=tick)
    acc["adapters"].update(judge_rows(items, acc["families"], verdicts, seconds,
                                      max_new_tokens=max_new_tokens))
    acc["vs_judge"] = points_vs_judge(acc)
    return acc


def add_judge(
    backend: Any, items: list[LabelledItem], acc: dict[str, Any], *,
    max_new_tokens: int = JUDGE_NEW_TOKENS, tick: Tick | None = None,
) -> dict[str, Any]:
    """``aadd_judge`` from synchronous code (the suite)."""
    return asyncio.run(aadd_judge(backend, items, acc, max_new_tokens=max_new_tokens,
                                  tick=tick))
