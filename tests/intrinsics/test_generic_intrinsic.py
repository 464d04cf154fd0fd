"""An intrinsic the package has never heard of runs through ``intrinsic(...)``.

The test writes a granitelib-format io.yaml with its own instruction variable, enum and
likelihood rule, trains nothing (a random aLoRA with its own invocation, in the library layout)
and checks the result against a from-scratch PEFT forward that shares no code with the
package's path: rendered text, plain tokenization, ``PeftModel`` locating the invocation itself.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from mellea_local import aintrinsic, intrinsic
from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model
from mellea_local.errors import (
    IntrinsicInputError,
    IntrinsicOptionError,
    IntrinsicVariableError,
    IOConfigError,
    NotAnAdapterRunnerError,
)
from mellea_local.messages import Message
from mellea_local.rendering import to_chat_messages, to_message_dicts

from .conftest import BASE_NAME, BASE_SEED

TOL = 1e-4
NAME = "answer-quality"
INVOCATION = "<quality>"
CATEGORIES = {"good": 1.0, "bad": 0.0, "unsure": 0.5}
IO_YAML = f"""\
model: null
response_format: |
  {{"type": "object", "properties": {{"verdict": {{"type": "string",
    "enum": ["good", "bad", "unsure"]}}}}, "required": ["verdict"],
    "additionalProperties": false}}
transformations:
  - type: likelihood
    categories_to_values: {json.dumps(CATEGORIES)}
    input_path: ["verdict"]
  - type: nest
    input_path: []
    field_name: answer_quality
instruction: |-
  {INVOCATION} Question: {{question}}
  Rate the assistant's answer. Reply with {{{{"verdict": "good"}}}},
  {{{{"verdict": "bad"}}}} or {{{{"verdict": "unsure"}}}}.
parameters:
  max_completion_tokens: 12
"""


def _save_alora(tokenizer, out, invocation: str, io_yaml: str, seed: int = 21, base=None):
    from peft import LoraConfig, get_peft_model

    base = build_model(tokenizer, seed=BASE_SEED) if base is None else copy.deepcopy(base)
    config = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        task_type="CAUSAL_LM", init_lora_weights=False,
        alora_invocation_tokens=tokenizer.encode(invocation, add_special_tokens=False),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        get_peft_model(base, config).save_pretrained(out)
    (out / "io.yaml").write_text(io_yaml)
    return out


@pytest.fixture(scope="module")
def quality_library(tiny_tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("library")
    _save_alora(tiny_tokenizer, root / NAME / BASE_NAME / "alora", INVOCATION, IO_YAML)
    return root


@pytest.fixture()
def backend(tiny_tokenizer, quality_library):
    backend = LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=BASE_SEED),
                                         tiny_tokenizer, model_id=BASE_NAME)
    backend.add_adapter(NAME, roots=[quality_library])
    return backend


async def _generated(backend) -> ChatContext:
    ctx = ChatContext().add(Message("system", "Answer briefly."))
    mot, ctx = await backend.generate_from_context(
        Message("user", "What is the capital of France?"), ctx,
        model_options={"max_new_tokens": 12,
                       "bad_words_ids": [[t] for t in backend.tokenizer.all_special_ids]})
    await mot.avalue()
    return ctx


def _reference(tokenizer, base, adapter_dir, ctx: ChatContext, question: str) -> float:
    """From scratch: render, tokenize, PeftModel forward, category masses, expected value."""
    from peft import PeftModel

    history = to_message_dicts(to_chat_messages(ctx.view_for_generation()))
    instruction = IO_YAML.split("instruction: |-\n")[1].split("\nparameters:")[0]
    instruction = "\n".join(line[2:] for line in instruction.splitlines())
    instruction = instruction.format(question=question)
    text = tokenizer.apply_chat_template(
        [*history, {"role": "user", "content": instruction}],
        add_generation_prompt=True, tokenize=False) + '{"verdict": "'
    ids = tokenizer.encode(text, add_special_tokens=False)
    model = PeftModel.from_pretrained(copy.deepcopy(base), str(adapter_dir))
    model.eval()
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
    mass = dict.fromkeys(CATEGORIES, 0.0)
    for token_id in range(len(tokenizer)):
        piece = tokenizer.decode([token_id])
        hit = next((c for c in CATEGORIES if piece and c.startswith(piece)), None)
        hit = hit or next((c for c in CATEGORIES if piece == c + '"'), None)
        if hit:
            mass[hit] += float(probs[token_id])
    return sum(mass[c] * v for c, v in CATEGORIES.items()) / sum(mass.values())


@pytest.fixture(scope="module")
def embedded_setup(tmp_path_factory):
    """The shipped model (its generations re-render to the same tokens, so the cache of a
    generation serves the check), a pristine copy of its base, and the new aLoRA beside it."""
    embedded = LocalHFBackend.embedded()
    # The shipped adapters are already injected into embedded.model: load the base again.
    pristine = LocalHFBackend(embedded.model_id, device="cpu", dtype=torch.float32).model
    root = tmp_path_factory.mktemp("embedded-library")
    folder = root / NAME / embedded.base_model_name / "alora"
    _save_alora(embedded.tokenizer, folder, INVOCATION, IO_YAML, base=pristine)
    embedded.add_adapter(NAME, roots=[root])
    return embedded, pristine, folder


async def test_unknown_intrinsic_reuses_the_cache_and_equals_a_scratch_peft_forward(
    embedded_setup
):
    backend, pristine, folder = embedded_setup
    ctx = await _generated(backend)
    generation = backend.stats.last
    question = "What is the capital of France?"
    result = await aintrinsic(backend, NAME, ctx, question=question)
    assert set(result) == {"answer_quality"} and set(result["answer_quality"]) == {"verdict"}
    score = result["answer_quality"]["verdict"]
    assert isinstance(score, float) and 0.0 <= score <= 1.0
    check = backend.stats.last
    # Suffix-only prefill: everything the generation computed (prompt and answer) is reused,
    # and only the intrinsic's turn (end of the answer, instruction, forced JSON) is computed.
    assert check.reused_tokens >= generation.prefilled_tokens + generation.reused_tokens
    turn = len(backend.tokenizer.encode(
        backend.adapter_for(NAME).io_config.render_instruction(question=question),
        add_special_tokens=False))
    assert check.prefilled_tokens <= turn + 16
    reference = _reference(backend.tokenizer, pristine, folder, ctx, question)
    assert abs(score - reference) <= TOL
    backend.engine.holder.assert_base()


def test_sync_form_and_variables(backend):
    ctx = ChatContext().add(Message("user", "Hi")).add(Message("assistant", "Hello"))
    result = intrinsic(backend, NAME, ctx, question="Is this polite?")
    assert 0.0 <= result["answer_quality"]["verdict"] <= 1.0
    with pytest.raises(IntrinsicVariableError, match="question=") as missing:
        intrinsic(backend, NAME, ctx)
    assert isinstance(missing.value, TypeError)
    with pytest.raises(IntrinsicVariableError, match="topic"):
        intrinsic(backend, NAME, ctx, question="q", topic="extra")
    backend.engine.holder.assert_base()


def test_model_options_honoured_or_refused(backend):
    ctx = ChatContext().add(Message("user", "Hi")).add(Message("assistant", "Hello"))
    plain = intrinsic(backend, NAME, ctx, question="q")["answer_quality"]["verdict"]
    greedy = intrinsic(backend, NAME, ctx, question="q",
                       model_options={"temperature": 0})["answer_quality"]["verdict"]
    hot = intrinsic(backend, NAME, ctx, question="q",
                    model_options={"temperature": 5.0})["answer_quality"]["verdict"]
    assert plain == greedy
    assert abs(hot - plain) > 1e-3  # probabilities are read at the temperature asked for
    system = intrinsic(backend, NAME, ctx, question="q",
                       model_options={"system": "Be strict."})["answer_quality"]["verdict"]
    assert system != plain  # the system turn is part of what the adapter reads
    for bad in ({"seed": 3}, {"stop": ["x"]}, {"top_p": 0.5}, {"temperature": -1}):
        with pytest.raises(IntrinsicOptionError) as err:
            intrinsic(backend, NAME, ctx, question="q", model_options=bad)
        assert isinstance(err.value, ValueError) and err.value.option in (
            "@@@seed@@@", "@@@stop@@@", "top_p", "temperature")
    backend.engine.holder.assert_base()


def test_max_new_tokens_bounds_the_general_path(backend):
    from mellea_local.errors import IntrinsicOutputError
    from mellea_local.intrinsics.call import aintrinsic_batch

    ctx = ChatContext().add(Message("user", "Hi")).add(Message("assistant", "Hello"))
    import asyncio

    [full] = asyncio.run(aintrinsic_batch(backend, NAME, ctx, [{"question": "q"}], fast=False))
    assert 0.0 <= full["answer_quality"]["verdict"] <= 1.0
    with pytest.raises(IntrinsicOutputError, match="MAX_NEW_TOKENS"):
        asyncio.run(aintrinsic_batch(backend, NAME, ctx, [{"question": "q"}], fast=False,
                                     model_options={"max_new_tokens": 2}))


def test_an_empty_or_unanswered_context_is_refused(backend):
    with pytest.raises(IntrinsicInputError, match="empty"):
        intrinsic(backend, NAME, ChatContext(), question="q")


def test_a_backend_that_cannot_run_adapters_is_refused():
    with pytest.raises(NotAnAdapterRunnerError, match="AdapterRunner"):
        intrinsic(object(), NAME, ChatContext(), question="q")


def test_explicit_intrinsic_name_at_add_adapter(tiny_tokenizer, quality_library, tmp_path):
    folder = tmp_path / "somewhere"
    folder.mkdir()
    src = quality_library / NAME / BASE_NAME / "alora"
    for f in src.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    backend = LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=BASE_SEED),
                                         tiny_tokenizer, model_id=BASE_NAME)
    adapter = backend.add_adapter(folder, intrinsic="graded-answer")
    assert adapter.intrinsic == "graded-answer"
    ctx = ChatContext().add(Message("user", "Hi")).add(Message("assistant", "Hello"))
    assert "answer_quality" in intrinsic(backend, "graded-answer", ctx, question="q")


@pytest.mark.parametrize("key, value, message", [
    ("parameters", {"max_completion_tokens": 12, "top_p": 0.9}, "top_p"),
    ("parameters", {"max_completion_tokens": 12, "extra_body": {}}, "extra_body"),
    ("transformations", [{"type": "decode_sentences", "input_path": [None, "r"],
                          "source": "documents", "output_names": {"begin": "b"}}],
     "sentence_boundaries"),
])
def test_unapplied_io_yaml_setting_is_refused_at_add_adapter(
    tiny_tokenizer, quality_library, tmp_path, key, value, message
):
    import yaml

    folder = tmp_path / key
    folder.mkdir()
    src = quality_library / NAME / BASE_NAME / "alora"
    for f in src.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    data = yaml.safe_load(IO_YAML)
    data[key] = value
    (folder / "io.yaml").write_text(yaml.safe_dump(data))
    backend = LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=BASE_SEED),
                                         tiny_tokenizer, model_id=BASE_NAME)
    with pytest.raises(IOConfigError, match=message):
        backend.add_adapter(folder, intrinsic=NAME)
    assert backend.adapters == {}
    assert backend.engine.holder.adapter_names == []
