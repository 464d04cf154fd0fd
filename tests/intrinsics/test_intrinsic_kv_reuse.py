"""Issue 33 item 4: intrinsics after a RAG generation, at the compute floor.

On the embedded (tiny) model with random adapters built here: every aLoRA intrinsic after a
RAG generation reads the documents and the conversation from the base cache and prefills only
its own suffix; a plain-LoRA intrinsic says in ``backend.stats`` that it could not reuse it.
Generation and intrinsics place documents by one rule (``rendering.place_documents``), so this
holds on a chat template with a ``documents`` slot as on one without (the embedded template).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from mellea_local.adapters.kinds import find_run
from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model
from mellea_local.intrinsics.call import aintrinsic_batch, as_runner
from mellea_local.intrinsics.intrinsic import Intrinsic
from mellea_local.intrinsics.options import scoring_options
from mellea_local.intrinsics.prompt import build_prompts
from mellea_local.intrinsics.scoring import category_tokens, fast_path_for
from mellea_local.messages import Message

from .conftest import BASE_NAME, BASE_SEED
from .test_granitelib_intrinsics import _save

TOL = 1e-4
DOCS = ["Owls are nocturnal birds of prey. They hunt at night, mostly small mammals.",
        "Barn owls sleep during the day in barns, hollow trees and church towers."]
ALORAS = {  # intrinsic -> variables of one call
    "requirement-check": {"requirement": "Cite the documents."},
    "uncertainty": {},
    "guardian-core": {"criteria": "The answer is rude.",
                      "scoring_schema": "Score the last assistant answer."},
    "policy-guardrails": {"policy_text": "Never give medical advice."},
}
LORA = ("requirement-check", {"requirement": "Cite the documents."})  # as a plain LoRA


@pytest.fixture(scope="module")
def library(tiny_tokenizer, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kv-reuse-lib")
    base = build_model(tiny_tokenizer, seed=BASE_SEED)
    for seed, name in enumerate(ALORAS):
        _save(tiny_tokenizer, base, root / name / BASE_NAME / "alora", name, 300 + seed)
    _save(tiny_tokenizer, base, root / "lora", "query_rewrite", 399)  # invocation-free LoRA
    (root / "lora" / "io.yaml").write_text(
        (root / LORA[0] / BASE_NAME / "alora" / "io.yaml").read_text())
    return root


def make_backend(tokenizer, library: Path) -> LocalHFBackend:
    backend = LocalHFBackend.from_loaded(build_model(tokenizer, seed=BASE_SEED), tokenizer,
                                         model_id=BASE_NAME)
    for name in ALORAS:
        backend.add_adapter(name, roots=[library])
    backend.add_adapter(library / "lora", name="rc-lora", intrinsic=LORA[0])
    return backend


@pytest.fixture(scope="module")
def backend(tiny_tokenizer, library) -> LocalHFBackend:
    return make_backend(tiny_tokenizer, library)


async def rag_generation(backend: LocalHFBackend) -> ChatContext:
    """A generated answer to a question with documents (the base cache then holds it)."""
    backend.prefix_cache.clear()
    mot, ctx = await backend.generate_from_context(
        Message("user", "When do owls hunt?", documents=DOCS), ChatContext(),
        model_options={"max_new_tokens": 12,
                       "bad_words_ids": [[t] for t in backend.tokenizer.all_special_ids]})
    await mot.avalue()
    return ctx


def asked(backend: LocalHFBackend) -> int:
    """Tokens of the RAG generation's prompt (documents, question, generation prompt)."""
    from mellea_local.rendering.request import render_request

    ctx = ChatContext().add(Message("user", "When do owls hunt?", documents=DOCS))
    ids, _, _ = render_request(backend.tokenizer, None, ctx, base_options=None,
                               model_options=None, model_id=BASE_NAME, positions=None)
    return len(ids)


def _common_prefix(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def prompt_of(backend: LocalHFBackend, name: str, ctx: ChatContext, variables: dict,
              adapter_name: str | None = None):
    runner = as_runner(backend)
    adapter = runner.adapter_for(name, name=adapter_name)
    intrinsic = Intrinsic.for_adapter(adapter)
    options = scoring_options(None, backend.tokenizer.chat_template,
                              defaults=intrinsic.config.parameters)
    [prompt] = build_prompts(backend.tokenizer, intrinsic, adapter, ctx, [variables], options)
    spec = fast_path_for(runner, intrinsic)
    forced = len(category_tokens(backend.tokenizer, spec).forced) if spec is not None else 0
    return adapter, prompt, forced


SLOT = ("{%- if documents -%}{{- '<|start_of_role|>documents<|end_of_role|>' -}}"
        "{%- for d in documents -%}{{- '[' ~ (d.doc_id or loop.index0) ~ '] ' ~ d.text ~ "
        "'\\n' -}}{%- endfor -%}{{- '<|end_of_text|>\\n' -}}{%- endif -%}\n")


@pytest.fixture(scope="module")
def slot_backend(tiny_tokenizer, library) -> LocalHFBackend:
    """The same model and adapters, under a chat template that reads ``documents``."""
    tokenizer = copy.deepcopy(tiny_tokenizer)
    template = tokenizer.chat_template
    at = template.index("{%- for message in loop_messages -%}")
    tokenizer.chat_template = template[:at] + SLOT + template[at:]
    return make_backend(tokenizer, library)


@pytest.mark.parametrize("which", ["backend", "slot_backend"])
async def test_each_alora_intrinsic_after_a_rag_generation_prefills_only_its_suffix(
        which, request):
    backend = request.getfixturevalue(which)
    ctx = await rag_generation(backend)
    [generated] = backend.prefix_cache.entries()  # documents, question and answer
    first = True
    for name, variables in ALORAS.items():
        adapter, prompt, forced = prompt_of(backend, name, ctx, variables)
        assert find_run(prompt.ids, adapter.invocation_tokens) == prompt.shared
        before = backend.stats.total
        await aintrinsic_batch(backend, name, ctx, [variables])
        last = backend.stats.last
        suffix = len(prompt.ids) - prompt.shared
        if first:
            # Documents and question rendered as the generation rendered them: all of its
            # prompt is reused, and of the answer what re-tokenises alike (a random model's
            # text may not); the first intrinsic adds the turn's close and the next header.
            common = _common_prefix(prompt.ids, generated.token_ids)
            assert common >= asked(backend)
            assert last.reused_tokens == common
            assert last.prefilled_tokens == len(prompt.ids) - common + forced
            first = False
        else:
            assert last.reused_tokens == prompt.shared  # documents + conversation: cached
            assert last.prefilled_tokens == suffix + forced  # its own suffix, nothing more
        assert last.unreusable_calls == 0 and last.cache_hits == 1
        assert backend.stats.unreusable_calls == before.unreusable_calls


async def test_a_lora_intrinsic_says_in_stats_that_it_could_not_reuse(backend):
    ctx = await rag_generation(backend)
    name, variables = LORA
    adapter, prompt, forced = prompt_of(backend, name, ctx, variables, "rc-lora")
    assert adapter.kind.value == "lora"
    before = backend.stats.unreusable_calls
    await aintrinsic_batch(backend, name, ctx, [variables], adapter="rc-lora")
    last = backend.stats.last
    assert last.unreusable_calls == 1 and last.cache_misses == 1
    assert (last.reused_tokens, last.reusable_tokens) == (0, 0)
    assert last.prefilled_tokens == len(prompt.ids) + forced  # all of it, documents included
    assert backend.stats.unreusable_calls == before + 1
    assert "unreusable_calls=" in repr(backend.stats)
    # An aLoRA call right after is not counted as one.
    await aintrinsic_batch(backend, "uncertainty", ctx, [{}])
    assert backend.stats.last.unreusable_calls == 0
    assert backend.stats.unreusable_calls == before + 1


def test_documents_fill_the_template_slot_in_generation_and_intrinsics(slot_backend):
    from mellea_local.rendering.request import render_request

    tokenizer = slot_backend.tokenizer
    ctx = ChatContext().add(Message("user", "When do owls hunt?", documents=DOCS))
    ids, _, _ = render_request(tokenizer, None, ctx, base_options=None, model_options=None,
                               model_id=BASE_NAME, positions=None)
    text = tokenizer.decode(ids)
    assert "<|start_of_role|>documents<|end_of_role|>[0] " + DOCS[0] in text
    assert "[Document 0]" not in text  # not also inline
    ctx = ctx.add(Message("assistant", "At night."))
    _, prompt, _ = prompt_of(slot_backend, "uncertainty", ctx, {})
    assert tokenizer.decode(prompt.ids).startswith(text.removesuffix(
        "<|start_of_role|>assistant<|end_of_role|>"))


@pytest.mark.parametrize("which", ["backend", "slot_backend"])
async def test_alora_intrinsics_after_a_rag_generation_equal_from_scratch(which, request):
    backend = request.getfixturevalue(which)
    ctx = await rag_generation(backend)
    reused = [(await aintrinsic_batch(backend, n, ctx, [v]))[0] for n, v in ALORAS.items()]
    scratch = [(await aintrinsic_batch(backend, n, ctx, [v], reuse=False))[0]
               for n, v in ALORAS.items()]
    for a, b in zip(reused, scratch, strict=True):
        assert _close(a, b), (a, b)


def _close(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return abs(a - b) <= TOL
    return a == b


# ----- several intrinsics on one turn: one mixed-adapter forward ------------------------------

FAST = ["requirement-check", "guardian-core", "uncertainty"]  # likelihood: the fast path


async def test_intrinsics_on_one_turn_run_as_one_mixed_forward_equal_to_one_at_a_time(
        backend):
    from mellea_local.intrinsics import aintrinsics_on_turn

    calls = [(n, ALORAS[n]) for n in FAST] + [
        ("requirement-check", {"requirement": "Answer in one sentence."}),
        ("policy-guardrails", ALORAS["policy-guardrails"])]
    ctx = await rag_generation(backend)
    expected = [(await aintrinsic_batch(backend, n, ctx, [v], reuse=False))[0]
                for n, v in calls]
    await rag_generation(backend)
    before = backend.stats.total
    got = await aintrinsics_on_turn(backend, ctx, calls)
    for a, b in zip(got, expected, strict=True):
        assert _close(a, b), (a, b)
    fast = [c for c in calls if _fast(backend, c[0])]
    assert len(fast) == 4  # policy-guardrails has no likelihood rule: generation
    calls_made = (backend.stats.total.cache_hits + backend.stats.total.cache_misses
                  - before.cache_hits - before.cache_misses)
    assert calls_made == 1 + len(calls) - len(fast)  # the four fast ones: one forward
    # Different adapters answered: the two requirement checks differ from each other and
    # from the guardian's score.
    assert abs(got[0]["requirement_check"]["score"] - got[3]["requirement_check"]["score"]) > 0


def _fast(backend, name: str) -> bool:
    runner = as_runner(backend)
    return fast_path_for(runner, Intrinsic.for_adapter(runner.adapter_for(name))) is not None


async def test_mixed_forward_prefills_the_suffixes_only_after_the_conversation_is_cached(
        backend):
    from mellea_local.intrinsics import aintrinsics_on_turn

    calls = [(n, ALORAS[n]) for n in FAST]
    ctx = await rag_generation(backend)
    await aintrinsics_on_turn(backend, ctx, calls)
    await aintrinsics_on_turn(backend, ctx, calls)
    last = backend.stats.last
    prompts = [prompt_of(backend, n, ctx, v) for n, v in calls]
    assert last.reused_tokens == prompts[0][1].shared
    assert last.prefilled_tokens == sum(len(p.ids) - p.shared + f for _, p, f in prompts)


async def test_an_alora_and_a_lora_on_one_turn_do_not_mix_and_stay_exact(backend):
    from mellea_local.intrinsics import aintrinsics_on_turn

    ctx = await rag_generation(backend)
    runner = as_runner(backend)
    alora = runner.adapter_for("requirement-check")
    lora = backend.adapters["rc-lora"]
    _, prompt, _ = prompt_of(backend, "requirement-check", ctx, ALORAS["requirement-check"])
    # A LoRA's K/V differ from the base cache's on every token: it cannot share the forward.
    assert not backend.can_mix([(alora, prompt.ids), (lora, prompt.ids)], prompt.shared)
    assert backend.can_mix([(alora, prompt.ids), (alora, prompt.ids)], prompt.shared)
    got = await aintrinsics_on_turn(backend, ctx, [("requirement-check",
                                                    ALORAS["requirement-check"])] * 2)
    assert _close(got[0], got[1])


async def test_a_malformed_call_list_is_a_typed_error(backend):
    from mellea_local.errors import InputTypeError
    from mellea_local.intrinsics import aintrinsics_on_turn

    ctx = await rag_generation(backend)
    with pytest.raises(InputTypeError, match="pairs"):
        await aintrinsics_on_turn(backend, ctx, ["requirement-check"])
    assert len(await aintrinsics_on_turn(backend, ctx, [("uncertainty", {})])) == 1
