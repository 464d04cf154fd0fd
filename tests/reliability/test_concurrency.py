"""Concurrent mixed calls equal the same calls run one by one, faults included; the prefix
cache stays inside its token budget however many conversations pass through.

On the shipped model and its two trained adapters (aLoRA and LoRA), sized for CI: a few dozen
calls. The same properties at load (3 x 100 calls, 249 with injected faults) held when the
reliability issue was filed; these tests keep them.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from mellea_local import ChatContext, LocalHFBackend, Message, ModelOption, arequirement_checks
from mellea_local.errors import MelleaLocalError

TOL = 1e-4
QUESTIONS = ["What is 2 + 2?", "What is the capital of Japan?", "How much is 3 plus 5?",
             'Repeat after me: "blue river 42"', "Name the capital of Italy.", "What is 7 + 1?"]
REQUIREMENTS = ["The response has a number.", "The response is written in all capital letters.",
                "The response mentions tokyo.", "The response is at most 5 words long."]
FAULTS = [
    ("adapter", "no-such-adapter"),     # unknown adapter name
    ("options", {"temprature": 0.5}),   # misspelt option
    ("text", "bad \ud800 text"),        # not Unicode
    ("requirements", "a bare string"),  # a str where a list belongs
]


@pytest.fixture(scope="module")
def backend() -> LocalHFBackend:
    return LocalHFBackend.embedded()


async def _answer(backend: LocalHFBackend, question: str) -> tuple[str, Any]:
    mot, ctx = await backend.generate_from_context(
        Message("user", question), ChatContext(), model_options={ModelOption.MAX_NEW_TOKENS: 16})
    return await mot.avalue(), ctx


async def _fault(backend: LocalHFBackend, ctx: Any, kind: str, value: Any) -> Any:
    if kind == "adapter":
        return await arequirement_checks(ctx, backend, REQUIREMENTS[:1], adapter=value)
    if kind == "options":
        return await arequirement_checks(ctx, backend, REQUIREMENTS[:1], model_options=value)
    if kind == "text":
        return await _answer(backend, value)
    return await arequirement_checks(ctx, backend, value)


def _plan(seed: int, n: int) -> list[tuple[str, Any]]:
    rng = random.Random(seed)
    plan: list[tuple[str, Any]] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.3:
            plan.append(("generate", rng.randrange(len(QUESTIONS))))
        elif r < 0.55:
            plan.append(("check_alora", (rng.randrange(len(QUESTIONS)), rng.choice(REQUIREMENTS))))
        elif r < 0.8:
            plan.append(("check_lora", (rng.randrange(len(QUESTIONS)), rng.choice(REQUIREMENTS))))
        else:
            plan.append(("fault", rng.choice(FAULTS)))
    return plan


async def _run(backend: LocalHFBackend, contexts: list[Any], step: tuple[str, Any]) -> Any:
    kind, arg = step
    try:
        if kind == "generate":
            return (await _answer(backend, QUESTIONS[arg]))[0]
        if kind == "fault":
            return await _fault(backend, contexts[0], *arg)
        i, req = arg
        adapter = "requirement-check_alora" if kind == "check_alora" else "requirement-check_lora"
        return await arequirement_checks(contexts[i], backend, [req], adapter=adapter)
    except MelleaLocalError as exc:
        return type(exc)


async def test_concurrent_mixed_calls_with_faults_equal_serial(backend):
    answered = [await _answer(backend, q) for q in QUESTIONS]
    contexts = [ctx for _, ctx in answered]
    plan = _plan(seed=7, n=32)
    assert sum(kind == "fault" for kind, _ in plan) >= 4
    serial = [await _run(backend, contexts, step) for step in plan]
    backend.prefix_cache.clear()
    concurrent = await asyncio.gather(*(_run(backend, contexts, step) for step in plan))
    for step, one, many in zip(plan, serial, concurrent, strict=True):
        if step[0] == "fault":
            assert isinstance(one, type) and issubclass(one, MelleaLocalError), step
            assert many is one, step  # the same typed error, alone: its neighbours ran
        elif step[0] == "generate":
            assert many == one, step  # greedy text, token for token
        else:
            assert abs(many[0] - one[0]) <= TOL, step
    # Nothing leaked: no adapter left active, the base answers as before.
    assert backend.engine.holder.active_adapter is None
    assert (await _answer(backend, QUESTIONS[0]))[0] == answered[0][0]


async def test_a_cancelled_generation_among_checks_changes_no_result(backend):
    ctx = (await _answer(backend, QUESTIONS[1]))[1]
    before = await arequirement_checks(ctx, backend, REQUIREMENTS)
    long = asyncio.ensure_future(backend.generate_from_context(
        Message("user", "Tell me a long story."), ctx,
        model_options={ModelOption.MAX_NEW_TOKENS: 400}))
    mot, _ = await long
    reading = asyncio.ensure_future(mot.avalue())
    checks = asyncio.ensure_future(arequirement_checks(ctx, backend, REQUIREMENTS))
    await asyncio.sleep(0.05)
    reading.cancel()
    after = await checks
    assert max(abs(a - b) for a, b in zip(before, after, strict=True)) <= TOL
    assert backend.engine.holder.active_adapter is None
    assert await arequirement_checks(ctx, backend, REQUIREMENTS) == pytest.approx(before,
                                                                                   abs=TOL)


async def test_the_prefix_cache_stays_inside_its_token_budget():
    """20 conversations through a 600-token cache: accounted tokens never pass the budget."""
    budget = 600
    small = LocalHFBackend.embedded(kv_cache_tokens=budget)
    rng = random.Random(3)
    for n in range(20):
        q = f"{rng.choice(QUESTIONS)} " + " ".join(rng.choice(["red", "blue", "river", "city"])
                                                   for _ in range(rng.randrange(5, 40)))
        _, ctx = await _answer(small, q)
        await arequirement_checks(ctx, small, REQUIREMENTS[:2])
        stats = small.stats
        assert stats.cache_tokens <= stats.cache_budget == budget, n
    assert small.stats.cache_evictions > 0  # the budget was actually reached
    assert small.stats.cache_entries >= 1
