"""Plain generation as one streamed base request, continued on the next server when one dies.

The server samples (``sampling``); the client decodes each chunk's token ids with our own
tokenizer, pushes the new text, and stops at a stop string or on cancellation. After a
fail-over the request continues from the ids already made (greedy: the same tokens).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from mellea_local.backends.finish import GenerationOutput
from mellea_local.backends.llama_server.adapter_requests import AdapterRequests
from mellea_local.backends.llama_server.client import Completion
from mellea_local.backends.llama_server.routing import Server, Slot, SlotKind, SlotState
from mellea_local.backends.llama_server.sampling import sampling_body

OnFleet = Callable[[Sequence[int], Callable[[Server, Slot], Awaitable[None]]], Awaitable[None]]


async def stream_generate(
    on_fleet: OnFleet, requests: AdapterRequests, tokenizer: Any, ids: list[int],
    gen_kwargs: Mapping[str, Any], budget: int, on_text: Callable[[str], None] | None,
    stops: Sequence[str], cancel: threading.Event,
) -> tuple[GenerationOutput, list[Completion]]:
    """The generation's output and the final replies (their timings feed the stats)."""
    body = sampling_body(gen_kwargs)
    eot = tokenizer.eos_token_id
    new_ids: list[int] = []
    finals: list[Completion] = []
    state = {"sent": "", "eos": False}

    async def run(server: Server, slot: Slot) -> None:
        prompt = ids + new_ids  # after a fail-over: continue from what was made
        request = requests.base_request(slot, prompt, {**body,
                                                       "n_predict": budget - len(new_ids)})
        async with slot.launch(server.gate) as done:
            await consume(server.client.stream(request))
            done(SlotState(SlotKind.BASE, ids + new_ids))

    async def consume(stream: Any) -> None:
        try:
            async for item in stream:
                if isinstance(item, Completion):
                    finals.append(item)
                    state["eos"] = item.stop_type == "eos"
                    break
                new_ids.extend(item)
                text = tokenizer.decode(new_ids, skip_special_tokens=True)
                sent = state["sent"]
                if on_text and not text.endswith("\ufffd") and len(text) > len(sent):
                    on_text(text[len(sent):])
                    state["sent"] = text
                if cancel.is_set() or any(text.endswith(s) for s in stops):
                    break
        finally:
            await stream.aclose()

    if budget > 0:
        await on_fleet(ids, run)
    eos = bool(state["eos"])
    if eos and (not new_ids or new_ids[-1] != eot):
        new_ids.append(eot)  # as transformers returns it, and counts it
    text = tokenizer.decode(new_ids, skip_special_tokens=True)
    if on_text and len(text) > len(state["sent"]):
        on_text(text[len(state["sent"]):])
    return GenerationOutput(new_ids, len(ids), eos, cancel.is_set()), finals
