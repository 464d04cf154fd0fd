"""Adapter bookkeeping per request: which ``lora`` list a request states, where an aLoRA
starts, and what the slot holds afterwards (``routing`` decides which server and slot).

The rules (``routing``'s docstring has the server behaviour behind them):

- base requests state every adapter at 0, except right after an aLoRA on a keyed server when
  the prompt diverges at or before that aLoRA's invocation: the stated list would make the
  server drop the slot's base K/V, and omitting it is exact there (no one without the key can
  change the server-wide scales, which are 0 from launch);
- a LoRA request states its adapter and runs on a lane of its own (``lane``);
- an aLoRA request states its adapter, runs alone on its server, and first cleans a slot whose
  K/V an earlier aLoRA computed past the shared part.

Every request first fits the slot's context (``check_fits``) and runs inside the slot's launch
bracket (``routing.Slot.launch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mellea_local.adapters.kinds import find_run
from mellea_local.backends.adapter_registry import Adapter
from mellea_local.backends.llama_server.client import Completion, lora_field
from mellea_local.backends.llama_server.routing import (
    Server,
    Slot,
    SlotKind,
    SlotState,
    alora_needs_clean,
    base_needs_clear,
)
from mellea_local.errors import AloraActivationError, PromptTooLongError


def reusable_prefix(adapter: Adapter | None, ids_len: int, shared: int) -> int:
    """How many prompt tokens a cache could serve for this call (for the stats)."""
    if adapter is None:
        return ids_len - 1
    return adapter.strategy.base_cache_prefix(shared)


class _Lane:
    """The ``routing`` lane of an adapter call (``PerRequestEngine``): a LoRA's own slot of
    the conversation's server, an aLoRA the conversation's slot."""

    def __init__(self, lora_ids: dict[str, int]) -> None:
        self.lora_ids = lora_ids

    def every_token(self, adapter: Adapter) -> bytes:
        return f"/lora/{self.lora_ids[adapter.name]}".encode()

    def from_invocation(self, adapter: Adapter, invocation: list[int]) -> bytes:
        return b""


class _Send:
    """One adapter request on a chosen slot, in the form the adapter's kind takes
    (``PerRequestEngine``)."""

    def __init__(self, requests: AdapterRequests, server: Server, slot: Slot, ids: list[int],
                 request: dict[str, Any], reuse: bool) -> None:
        self.requests, self.server, self.slot = requests, server, slot
        self.ids, self.request, self.reuse = ids, request, reuse

    async def every_token(self, adapter: Adapter) -> Completion:
        async with self.slot.launch(self.server.gate) as done:
            out = await self.server.client.complete(self.request)
            done(SlotState(SlotKind.LORA, self.ids + out.tokens))
        return out

    async def from_invocation(self, adapter: Adapter, invocation: list[int]) -> Completion:
        ids, slot, server = self.ids, self.slot, self.server
        start = AdapterRequests.alora_start(adapter, ids, invocation)
        if self.reuse and alora_needs_clean(slot.state, ids, start):
            await self.requests.base(server, slot, ids[:start],
                                     {"n_predict": 1, "temperature": 0.0})
        async with slot.launch(server.gate, exclusive=True) as done:  # routing.ServerGate
            out = await server.client.complete(self.request)
            done(SlotState(SlotKind.ALORA, ids + out.tokens, start))
        return out


class AdapterRequests:
    """Builds and sends each request's adapter part on a chosen slot."""

    def __init__(self, lora_ids: dict[str, int], *, keyed: bool, n_ctx: int | None) -> None:
        self.lora_ids = lora_ids
        self.keyed = keyed
        self.n_ctx = n_ctx

    def check_fits(self, ids: Sequence[int], n_predict: int) -> None:
        """Refuse a request the slot's context cannot hold, before sending it: the server
        would refuse the prompt, or stop a generation short at the context's end."""
        if self.n_ctx is None or len(ids) + max(1, n_predict) < self.n_ctx:
            return
        raise PromptTooLongError(
            f"The prompt is {len(ids)} tokens and asks for {n_predict} more, but each "
            f"llama-server slot holds {self.n_ctx} positions (-c / -np), so it does not fit. "
            "Shorten the conversation (drop or summarise old turns), lower max_new_tokens, or "
            "start the servers with a larger context per slot (LlamaServerBackend.launch(..., "
            "ctx=N)).")

    def lane(self, adapter: Adapter | None) -> bytes:
        """A LoRA runs on its own slot of the conversation's server: its K/V would otherwise
        replace the conversation's base K/V there."""
        if adapter is None:
            return b""
        return adapter.strategy.run_on(adapter, _Lane(self.lora_ids))

    def all_zero(self) -> list[dict[str, float]]:
        """The explicit all-zero ``lora`` list: the base model whatever the server-wide
        scales."""
        return lora_field([(i, 0.0) for i in self.lora_ids.values()]) or [
            {"id": 0, "scale": 0.0}]

    def base_request(self, slot: Slot, ids: list[int], body: dict[str, Any]) -> dict[str, Any]:
        """A base request's body on ``slot``, its ``lora`` list chosen for exact reuse."""
        self.check_fits(ids, int(body.get("n_predict", 1)))
        request = {"prompt": ids, "cache_prompt": True, "id_slot": slot.index, **body}
        if (not self.keyed or slot.state.kind != SlotKind.ALORA
                or base_needs_clear(slot.state, ids)):
            request["lora"] = self.all_zero()
        return request

    async def base(self, server: Server, slot: Slot, ids: list[int],
                   body: dict[str, Any]) -> Completion:
        """A non-streaming base request."""
        request = self.base_request(slot, ids, body)
        async with slot.launch(server.gate) as done:
            out = await server.client.complete(request)
            done(SlotState(SlotKind.BASE, ids + out.tokens))
        return out

    async def adapter(self, server: Server, slot: Slot, adapter: Adapter, ids: list[int],
                      body: dict[str, Any], *, reuse: bool) -> Completion:
        """A non-streaming request with ``adapter`` on."""
        self.check_fits(ids, int(body.get("n_predict", 1)))
        lora = lora_field([(self.lora_ids[adapter.name], 1.0)])
        request = {"prompt": ids, "cache_prompt": reuse, "id_slot": slot.index, "lora": lora,
                   **body}
        return await adapter.strategy.run_on(
            adapter, _Send(self, server, slot, ids, request, reuse))

    @staticmethod
    def alora_start(adapter: Adapter, ids: Sequence[int], invocation: Sequence[int]) -> int:
        """Where the server will start the aLoRA in ``ids``: after our guard, and only where
        PEFT would start it (the exported, shortened invocation must not occur later)."""
        adapter.strategy.require_activation(adapter, ids)
        start = adapter.strategy.activation_start(adapter, ids)
        if find_run(ids, invocation[1:]) != start + 1:
            raise AloraActivationError(
                f"aLoRA {adapter.name!r}: the prompt repeats {list(invocation[1:])} after its "
                f"last invocation {list(invocation)}, so llama-server would start the adapter "
                "there, not where PEFT does. Remove that text from the requirement, or use the "
                "plain LoRA.")
        return start
