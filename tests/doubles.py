"""A scripted Backend for testing loop logic (validation, agents) without a model.

It streams each scripted reply through the real ModelOutputThunk producer API from a worker
thread, like a real backend, and records every call so tests can assert what was asked.
Never use it to test model behaviour.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mellea_local.core.backend import Backend
from mellea_local.core.component import Span
from mellea_local.core.context import Context
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.core.tool_call import ModelToolCall


@dataclass
class Reply:
    """One scripted generation."""

    text: str
    thinking: str | None = None
    tool_calls: list[ModelToolCall] | None = None
    chunk_size: int = 3


@dataclass
class GenerateCall:
    action: Span
    ctx: Context
    format: Any
    model_options: dict[str, Any] | None
    tool_calls: bool


@dataclass
class ScoreCall:
    ctx: Context
    descriptions: list[str]
    intrinsic_name: str
    model_options: dict[str, Any] | None


@dataclass
class ScriptedBackend(Backend):
    replies: deque[Reply] = field(default_factory=deque)
    scores: deque[str] = field(default_factory=deque)
    intrinsics: frozenset[str] = frozenset()
    default_to_constraint_checking_alora: bool = True
    generate_calls: list[GenerateCall] = field(default_factory=list)
    score_calls: list[ScoreCall] = field(default_factory=list)

    @classmethod
    def scripted(
        cls,
        replies: Iterable[str | Reply] = (),
        *,
        scores: Iterable[str] = (),
        intrinsics: Iterable[str] = (),
        default_to_constraint_checking_alora: bool = True,
    ) -> ScriptedBackend:
        return cls(
            replies=deque(r if isinstance(r, Reply) else Reply(r) for r in replies),
            scores=deque(scores),
            intrinsics=frozenset(intrinsics),
            default_to_constraint_checking_alora=default_to_constraint_checking_alora,
        )

    async def generate_from_context(
        self,
        action: Span,
        ctx: Context,
        *,
        format: Any = None,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
    ) -> tuple[ModelOutputThunk[Any], Context]:
        self.generate_calls.append(GenerateCall(action, ctx, format, model_options, tool_calls))
        if not self.replies:
            raise AssertionError("ScriptedBackend ran out of scripted replies.")
        reply = self.replies.popleft()

        def post_process(mot: ModelOutputThunk[Any]) -> None:
            mot.thinking = reply.thinking
            mot.tool_calls = reply.tool_calls
            n = len(reply.text)
            mot.usage = {"prompt_tokens": 0, "completion_tokens": n, "total_tokens": n}
            mot.finish_reason = "tool_calls" if reply.tool_calls else "stop"

        mot: ModelOutputThunk[Any] = ModelOutputThunk(None)
        mot._start_generation(action=action, post_process=post_process)

        def produce() -> None:
            step = max(1, reply.chunk_size)
            for i in range(0, len(reply.text), step):
                mot._push_delta(reply.text[i : i + step])
            mot._push_done()

        threading.Thread(target=produce, daemon=True).start()
        return mot, ctx.add(action).add(mot)

    def supports_intrinsic(self, name: str) -> bool:
        return name in self.intrinsics

    async def score_requirements(
        self,
        ctx: Context,
        descriptions: Sequence[str],
        *,
        intrinsic_name: str = "requirement-check",
        model_options: dict[str, Any] | None = None,
    ) -> list[str]:
        self.score_calls.append(ScoreCall(ctx, list(descriptions), intrinsic_name, model_options))
        if len(self.scores) < len(descriptions):
            raise AssertionError("ScriptedBackend ran out of scripted scores.")
        return [self.scores.popleft() for _ in descriptions]
