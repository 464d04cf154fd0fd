"""react on a real tiny model: tool calls through the real chat template, KV reuse per turn.

The random model cannot solve anything, so each turn's text is forced with a real generate()
constraint (``prefix_allowed_tokens_fn``); everything else is the real path: rendering,
generation with the prefix cache, parsing, tool execution. Solving goals end to end needs the
trained embedded model (issue 5).
"""

from __future__ import annotations

import itertools
import json

import pydantic
import pytest
import torch

from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model
from mellea_local.messages import ToolMessage
from mellea_local.options import ModelOption
from mellea_local.react import react
from mellea_local.tools import calculator, lookup_tool


class Forcer:
    """A ``prefix_allowed_tokens_fn`` that makes generation ``k`` write ``texts[k]`` then stop.

    It notices a new generation when the sequence stops growing one token at a time, and
    records each prompt and the backend's counters at that moment (the previous generation's
    counts are in by then). Generations past the script are free.
    """

    def __init__(self, backend: LocalHFBackend, texts: list[str]) -> None:
        tok = backend.tokenizer
        self.backend = backend
        self.scripts = [[*tok.encode(t, add_special_tokens=False), tok.eos_token_id]
                        for t in texts]
        self.vocab = list(range(backend.model.get_output_embeddings().weight.shape[0]))
        self.prompts: list[list[int]] = []
        self.totals: list = []
        self._last = -1

    def __call__(self, batch_id: int, ids: torch.Tensor) -> list[int]:
        n = ids.shape[-1]
        if n != self._last + 1:
            self.prompts.append(ids.tolist())
            self.totals.append(self.backend.stats.total)
        self._last = n
        turn = len(self.prompts) - 1
        if turn >= len(self.scripts):
            return self.vocab
        forced = self.scripts[turn]
        return [forced[min(n - len(self.prompts[turn]), len(forced) - 1)]]

    def per_turn(self) -> list[tuple[int, int]]:
        """(prefilled, reused) of each generation."""
        marks = [*self.totals, self.backend.stats.total]
        return [(b.prefilled_tokens - a.prefilled_tokens, b.reused_tokens - a.reused_tokens)
                for a, b in itertools.pairwise(marks)]


@pytest.fixture
def backend(tiny_tokenizer):
    return LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=4), tiny_tokenizer,
                                      model_id="tiny-react")


TURNS = [
    '<think>I need the sum.</think>'
    '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": 5}}</tool_call>',
    '<tool_call>{"name": "lookup", "arguments": {"key": "paris"}}</tool_call>',
    '<tool_call>{"name": "final_answer", "arguments": {"answer": "5 in France"}}</tool_call>',
]


async def test_tool_calls_round_trip_and_each_turn_prefills_only_its_new_tokens(backend):
    forcer = Forcer(backend, TURNS)
    opts = {"prefix_allowed_tokens_fn": forcer, ModelOption.MAX_NEW_TOKENS: 64}
    out, ctx = await react("Add 2 and 3, then look up paris.", ChatContext(), backend,
                           tools=[calculator, lookup_tool({"paris": "France"})],
                           model_options=opts)

    assert out.value == "5 in France"
    observations = [e for e in ctx.as_list() if isinstance(e, ToolMessage)]
    contents = [o.content for o in observations]
    assert [contents[0], *contents[2:]] == ["5", "France", "5 in France"]
    # The parser refused the int argument against the schema; the model was told why.
    assert observations[1].content.startswith("Error: ") and "string" in observations[1].content
    answers = [e for e in ctx.as_list() if type(e).__name__ == "ComputedModelOutputThunk"]
    assert answers[0].thinking == "I need the sum."
    assert observations[0].tool_call_id == answers[0].tool_calls[0].tool_call_id

    tok = backend.tokenizer
    prompts, scripts = forcer.prompts, forcer.scripts
    assert len(prompts) == len(TURNS)
    turn2 = tok.decode(prompts[1])
    assert (
        '<|start_of_role|>assistant<|end_of_role|><think>I need the sum.</think><tool_call>'
        '{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call><|end_of_text|>\n'
        "<|start_of_role|>tool_response<|end_of_role|>5<|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|>Think about what to do next"
    ) in turn2
    assert turn2.startswith("<|start_of_role|>available_tools<|end_of_role|>"
                            + json.dumps(calculator.as_json_tool["function"]))
    stats = forcer.per_turn()
    for k in range(1, len(TURNS)):
        # The history re-renders token for token (thinking and tool calls included) ...
        previous = prompts[k - 1] + scripts[k - 1]
        assert prompts[k][: len(previous)] == previous
        # ... so the cache serves all of it but the final EOS, whose K/V was never computed,
        # and only the tokens new in this turn are prefilled.
        prefilled, reused = stats[k]
        assert reused == len(previous) - 1
        assert prefilled == len(prompts[k]) - reused
        assert prefilled < len(prompts[k]) // 2
    assert backend.stats.last.reused_tokens > 0


class City(pydantic.BaseModel):
    # Closed and bounded, so the random model's JSON always ends within the token budget.
    model_config = pydantic.ConfigDict(extra="forbid")

    name: str = pydantic.Field(max_length=8)
    rank: int = pydantic.Field(ge=0, le=99)


async def test_format_makes_the_final_answer_schema_valid_json(backend):
    forcer = Forcer(backend, [TURNS[-1]])
    opts = {"prefix_allowed_tokens_fn": forcer, ModelOption.MAX_NEW_TOKENS: 60,
            ModelOption.SEED: 0, "temperature": 1.0}
    out, ctx = await react("Name a city.", ChatContext(), backend, tools=[], format=City,
                           model_options=opts)
    assert isinstance(out.parsed_repr, City)
    assert City.model_validate_json(out.value) == out.parsed_repr
    assert ctx.as_list()[-1] is out
