"""The fleet's pure decisions: conversation keys, sticky ranking, and when a request's
``lora`` list must clear a slot (scripted states; the server tests prove the effects)."""

from __future__ import annotations

import asyncio

from mellea_local.backends.llama_server.routing import (
    Fleet,
    Server,
    ServerGate,
    Slot,
    SlotState,
    alora_needs_clean,
    base_needs_clear,
    root_key,
)

EOT = 0


def test_root_key_is_the_first_turn_and_stays_as_the_conversation_grows():
    first = [1, 5, 6, 7, EOT, 1, 9]
    later = [*first, 3, 3, EOT, 1, 8, 8, EOT]
    assert root_key(first, EOT) == root_key(later, EOT)
    assert root_key([1, 5, 6, 8, EOT], EOT) != root_key(first, EOT)


def test_base_request_clears_only_when_it_would_reuse_adapter_kv():
    check = SlotState("alora", [1, 2, 3, 4, 50, 51, 52], adapter_start=4)
    assert not base_needs_clear(check, [1, 2, 3, 4, 9, 9])  # diverges at the invocation
    assert base_needs_clear(check, [1, 2, 3, 4, 50, 9])  # would reuse the aLoRA's K/V
    assert not base_needs_clear(SlotState("base", [1, 2, 3]), [1, 2, 3, 4])
    assert not base_needs_clear(SlotState("empty"), [1])
    assert base_needs_clear(SlotState("lora", [1, 2]), [1, 2, 3])
    assert base_needs_clear(SlotState("unknown"), [1, 2, 3])


def test_alora_request_cleans_only_over_another_calls_adapter_kv():
    check = SlotState("alora", [1, 2, 3, 50, 51, 7], adapter_start=3)
    assert not alora_needs_clean(check, [1, 2, 3, 50, 51, 8], 3)  # same conversation, again
    assert alora_needs_clean(check, [1, 2, 3, 50, 51, 7, 1, 50, 51], 7)  # would reuse it
    assert not alora_needs_clean(SlotState("base", [1, 2, 3]), [1, 2, 3, 50, 51], 3)
    assert alora_needs_clean(SlotState("unknown"), [1, 50, 51], 1)


class _Client:
    def __init__(self, url, healthy=True):
        self.url = url
        self._healthy = healthy

    async def healthy(self):
        return self._healthy


async def test_ranking_is_sticky_and_only_a_dead_servers_keys_move():
    servers = [Server(_Client(f"http://127.0.0.1:{p}"), [Slot(0)]) for p in (1, 2, 3)]
    fleet = Fleet(servers, fresh=True)
    keys = [bytes([i]) for i in range(40)]
    before = {k: await fleet.pick(k) for k in keys}
    assert len(set(map(id, before.values()))) == 3
    dead = servers[0]
    dead.client._healthy = False
    fleet.mark_dead(dead)
    after = {k: await fleet.pick(k) for k in keys}
    for k in keys:
        assert after[k] is not dead
        if before[k] is not dead:
            assert after[k] is before[k]


async def test_gate_runs_exclusive_requests_alone():
    gate = ServerGate()
    running: list[str] = []
    overlaps = []

    async def job(kind, name):
        async with (gate.exclusive() if kind == "x" else gate.shared()):
            running.append(name)
            overlaps.append((kind, list(running)))
            await asyncio.sleep(0.01)
            running.remove(name)

    await asyncio.gather(job("s", "a"), job("s", "b"), job("x", "c"), job("s", "d"))
    for kind, seen in overlaps:
        if kind == "x":
            assert seen == ["c"]
    assert any(kind == "s" and len(seen) == 2 for kind, seen in overlaps)


def test_the_adapter_kind_picks_the_lane_and_the_exported_invocation():
    """The strategy decides (``AdapterKindStrategy.run_on``, ``engine_invocation``): a LoRA
    runs on a lane of its own and exports no invocation; an aLoRA runs on the conversation's
    slot and exports its invocation without the first token; one token is refused."""
    from types import SimpleNamespace

    import pytest

    from mellea_local.adapters import AdapterKind
    from mellea_local.adapters.kinds import strategy_for
    from mellea_local.backends.llama_server.adapter_requests import AdapterRequests
    from mellea_local.backends.llama_server.gguf_export import exported_invocation
    from mellea_local.errors import GGUFExportError

    requests = AdapterRequests({"a_lora": 3, "a_alora": 4}, keyed=True, n_ctx=None)
    lanes = {}
    for kind, name in ((AdapterKind.LORA, "a_lora"), (AdapterKind.ALORA, "a_alora")):
        adapter = SimpleNamespace(name=name, invocation_tokens=(7, 8, 9),
                                  strategy=strategy_for(kind))
        lanes[kind] = requests.lane(adapter)  # type: ignore[arg-type]
    assert lanes == {AdapterKind.LORA: b"/lora/3", AdapterKind.ALORA: b""}
    assert requests.lane(None) == b""
    assert exported_invocation(AdapterKind.LORA, (7, 8, 9)) is None
    assert exported_invocation(AdapterKind.ALORA, (7, 8, 9)) == [8, 9]
    with pytest.raises(GGUFExportError):
        exported_invocation(AdapterKind.ALORA, (7,))
