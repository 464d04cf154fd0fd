"""A fleet of llama-servers: which server and slot serves a request, and what its ``lora``
list must be for the slot's KV reuse to stay exact.

**Stickiness.** A conversation is keyed by its root: the prompt's tokens up to the end of its
first turn (the first end-of-turn token), which every later prompt of that conversation starts
with. Servers are ranked per key by rendezvous hashing (highest ``sha256(key, url)`` first),
so a key always lands on the same live server and only the keys of a dead server move. Within a
server a key keeps its slot (``id_slot``), so the slot's KV is that conversation's.

**Exact reuse, per slot.** The client tracks what each slot's KV holds (the tokens, and from
which index an adapter computed them) because the server reuses a slot's cache by token match
alone when a request omits ``lora``, and clears it when an explicit ``lora`` list changes the
set in some ways (``server-common.cpp: lora_should_clear_cache``). What we send:

- a base request after a base one, or after an aLoRA whose adapter-computed tokens the new
  prompt does not reach (it diverges at or before the invocation): ``lora`` omitted, the slot
  keeps its KV and the server reuses the matching base prefix: a ReACT turn after checks
  prefills only its new tokens;
- a base request that would match adapter-computed K/V (after a LoRA, or one that repeats a
  check's invocation), or on a slot we know nothing of: an explicit all-zero ``lora`` list,
  which makes the server clear the slot (the one costly case, and exact);
- an aLoRA request: its own ``lora`` entry; the server keeps base K/V across base -> aLoRA and
  caps reuse at the invocation. If the slot holds another aLoRA call's K/V that the new prompt
  would match beyond that call's invocation, a base request over the shared part runs first so
  the slot is clean;
- a LoRA request: its own entry, on a slot of its own (the conversation's key plus the
  adapter: ``AdapterRequests.lane``, as the kind's ``run_on`` decides), since the server
  clears a slot on any change to or from a LoRA and the conversation's base K/V would be
  lost; repeated checks with that LoRA
  reuse each other's K/V there, which is exact (same adapter, same tokens);
- aLoRA requests run alone on their server (``ServerGate``).

Slots: a server keeps as many conversations' K/V as it has slots (``-np``); more
conversations than slots evict the least recently used, which costs a re-prefill, never
exactness.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from mellea_local.backends.llama_server.client import ServerClient
from mellea_local.errors import LlamaServerUnavailableError

logger = logging.getLogger(__name__)
T = TypeVar("T")

RECHECK_SECONDS = 5.0
"""How long a server found dead is skipped before it is probed again."""


class SlotKind(enum.StrEnum):
    """What computed a slot's K/V."""

    EMPTY = "empty"  # nothing: a server we just started
    BASE = "base"
    ALORA = "alora"  # tokens from ``adapter_start`` on were computed by an aLoRA
    LORA = "lora"  # every token by a LoRA
    UNKNOWN = "unknown"  # a server we did not start, one that restarted, a request that failed


@dataclass
class SlotState:
    """What one slot's KV holds, as far as this client knows (``kind``, the ``tokens``, and
    from which index an aLoRA computed them)."""

    kind: SlotKind = SlotKind.UNKNOWN
    tokens: list[int] = field(default_factory=list)
    adapter_start: int = 0

    def __post_init__(self) -> None:
        self.kind = SlotKind(self.kind)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def base_needs_clear(state: SlotState, ids: Sequence[int]) -> bool:
    """Whether a base request for ``ids`` must send the explicit all-zero list (clear)."""
    if state.kind in (SlotKind.EMPTY, SlotKind.BASE):
        return False
    if state.kind == SlotKind.ALORA:
        # The server reuses up to len(ids) - 1 matching tokens; exact while they are base K/V.
        return min(common_prefix(state.tokens, ids), len(ids) - 1) > state.adapter_start
    return True  # "lora", "unknown"


def alora_needs_clean(state: SlotState, ids: Sequence[int], start: int) -> bool:
    """Whether an aLoRA request (adapter from ``start``) would reuse adapter-made K/V."""
    if state.kind in (SlotKind.EMPTY, SlotKind.BASE):
        return False
    if state.kind == SlotKind.ALORA:
        return min(common_prefix(state.tokens, ids), start) > state.adapter_start
    return state.kind == SlotKind.UNKNOWN  # "lora": the server clears on the switch itself


@dataclass
class Slot:
    index: int
    state: SlotState = field(default_factory=SlotState)
    owner: bytes | None = None
    last_used: float = 0.0
    _lock: asyncio.Lock | None = field(default=None, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)

    def lock(self) -> asyncio.Lock:
        """The slot's lock for the running event loop (sync wrappers run a loop per call)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            self._lock, self._loop = asyncio.Lock(), loop
        return self._lock

    @contextlib.asynccontextmanager
    async def launch(self, gate: ServerGate, *, exclusive: bool = False,
                     ) -> AsyncIterator[Callable[[SlotState], None]]:
        """One request on this slot, the protocol written once: the state is unknown while
        the request runs (a failure leaves it so: the server may have computed anything),
        the request passes the server's gate (aLoRAs alone: ``ServerGate``), and the caller
        sets the final state through the callable it is given, once the reply is in."""
        self.state = SlotState(SlotKind.UNKNOWN)
        final: list[SlotState] = []
        async with gate.exclusive() if exclusive else gate.shared():
            yield final.append
        if final:
            self.state = final[-1]

    def forget(self) -> None:
        """Someone used the slot behind the client's back (a raw request): what its K/V holds
        is unknown, so the next request states an explicit ``lora`` list and clears it."""
        self.state = SlotState(SlotKind.UNKNOWN)


class ServerGate:
    """Requests that may run together on one server (shared) and aLoRA requests, which run
    alone (exclusive; writers first, so checks are not starved by a stream of generations).

    Why: llama-server disables an aLoRA for the tokens before its invocation with a per-batch
    variable and re-enables it on the batch's *first* slot (``server-context.cpp``,
    ``alora_scale``/``alora_disabled_id``). When another slot is batched first, the aLoRA stays
    off for its own check and is switched on in the other slot's adapters: measured here as a
    check scoring 0.0 instead of PEFT's 0.118 with eight conversations on two servers.
    Base and LoRA requests are batched only with equal adapter sets, which is exact.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._changed: asyncio.Condition | None = None

    def _cond(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()
        if self._changed is None or self._loop is not loop:
            self._changed, self._loop = asyncio.Condition(), loop
            self._readers, self._writer, self._writers_waiting = 0, False, 0
        return self._changed

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        cond = self._cond()
        async with cond:
            await cond.wait_for(lambda: not self._writer and not self._writers_waiting)
            self._readers += 1
        try:
            yield
        finally:
            async with cond:
                self._readers -= 1
                cond.notify_all()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        cond = self._cond()
        async with cond:
            self._writers_waiting += 1
            try:
                await cond.wait_for(lambda: not self._writer and not self._readers)
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            async with cond:
                self._writer = False
                cond.notify_all()


@dataclass
class Server:
    client: ServerClient
    slots: list[Slot]
    alive: bool = True
    checked_at: float = 0.0
    gate: ServerGate = field(default_factory=ServerGate)

    def forget(self) -> None:
        """After a death: nothing is known of its slots any more."""
        for slot in self.slots:
            slot.state = SlotState(SlotKind.UNKNOWN)
            slot.owner = None


def root_key(ids: Sequence[int], end_of_turn: int | None) -> bytes:
    """The conversation's root: ids up to its first end-of-turn token (else the first 64)."""
    cut = 64
    if end_of_turn is not None and end_of_turn in ids:
        cut = list(ids).index(end_of_turn) + 1
    return hashlib.sha256(repr(list(ids[:cut])).encode()).digest()


class Fleet:
    """Servers with their slots; picks a (server, slot) per request and fails over."""

    def __init__(self, servers: list[Server], *, fresh: bool) -> None:
        self.servers = servers
        if fresh:
            for server in servers:
                for slot in server.slots:
                    slot.state = SlotState(SlotKind.EMPTY)

    def ranked(self, key: bytes) -> list[Server]:
        return sorted(self.servers, key=lambda s: hashlib.sha256(key + s.client.url.encode())
                      .digest(), reverse=True)

    async def pick(self, key: bytes) -> Server:
        """The first live server in the key's ranking; dead ones are re-probed after
        ``RECHECK_SECONDS``. ``LlamaServerUnavailableError`` when none is left."""
        for server in self.ranked(key):
            if not server.alive and time.monotonic() - server.checked_at > RECHECK_SECONDS:
                server.checked_at = time.monotonic()
                if await server.client.healthy():
                    server.alive = True
            if server.alive:
                return server
        raise LlamaServerUnavailableError(
            f"None of the {len(self.servers)} llama-server(s) answers "
            f"({', '.join(s.client.url for s in self.servers)}); restart them (or use "
            "LlamaServerBackend.launch) and retry.")

    def mark_dead(self, server: Server) -> None:
        server.alive = False
        server.checked_at = time.monotonic()
        server.forget()

    @contextlib.asynccontextmanager
    async def slot(self, server: Server, key: bytes) -> AsyncIterator[Slot]:
        """The key's slot on ``server`` (its own, else the least recently used), locked."""
        slot = next((s for s in server.slots if s.owner == key), None)
        if slot is None:
            free = [s for s in server.slots if not s.lock().locked()] or server.slots
            slot = min(free, key=lambda s: (s.owner is not None, s.last_used))
            slot.owner = key
        async with slot.lock():
            slot.owner = key
            slot.last_used = time.monotonic()
            yield slot

    async def run(self, key: bytes, run: Callable[[Server, Slot], Awaitable[T]]) -> T:
        """``run`` on the key's (server, slot); again on the next server when one dies;
        ``LlamaServerUnavailableError`` once none is left."""
        while True:
            server = await self.pick(key)
            try:
                async with self.slot(server, key) as slot:
                    return await run(server, slot)
            except LlamaServerUnavailableError as exc:
                logger.warning("%s; failing over", exc)
                self.mark_dead(server)

    async def health(self) -> dict[str, bool]:
        """Probe every server's ``/health`` now; a server that fails is marked dead (its
        conversations move at their next call), one that answers again is used again."""
        out = {}
        for server in self.servers:
            ok = await server.client.healthy()
            if not ok and server.alive:
                self.mark_dead(server)
            elif ok:
                server.alive = True
            out[server.client.url] = ok
        return out
