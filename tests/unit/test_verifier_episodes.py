"""A round's read may predate a lookup that finished while it ran: the item it lists is then
the episode just resolved, and gets no second lookup; a newer episode of it does."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from pacer_reconciler.ports import InDoubt
from pacer_reconciler.verifier import Verifier
from tests.unit.dispatching import until

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class Lookup:
    """Proves every send undelivered, once ``go`` is set; counts the questions per item."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.go = asyncio.Event()
        self.go.set()

    async def lookup(self, guid: str, idem_key: str, tenant: str = "default") -> bool | None:
        self.asked.append(idem_key)
        await self.go.wait()
        return False


class SlowSweeps:
    """In-doubt items in memory; while ``gate`` is closed a read waits, listing the items as
    they stood when it began (``snapshot_first``) or as they stand when it returns."""

    def __init__(self, items: list[InDoubt], snapshot_first: bool = True, decide: bool = True) -> None:
        self.items = {i.item_id: i for i in items}
        self.snapshot_first = snapshot_first
        self.decide = decide  # False: every lookup leaves its item in doubt
        self.gate = asyncio.Event()
        self.gate.set()
        self.reading = asyncio.Event()
        self.resolved: list[InDoubt] = []

    async def sweep(self, kind: str, limit: int) -> int:
        return 0

    async def in_doubt(self, limit: int) -> list[InDoubt]:
        before = list(self.items.values())[:limit]
        self.reading.set()
        await self.gate.wait()
        return before if self.snapshot_first else list(self.items.values())[:limit]

    async def resolve(self, item: InDoubt, found: bool | None, now: datetime) -> str | None:
        self.resolved.append(item)
        if self.decide and self.items.get(item.item_id) == item:
            del self.items[item.item_id]
            return "pending"
        return None


async def _round_while_a_lookup_finishes(sweeps: SlowSweeps, verifier: Verifier, lookup: Lookup,
                                         again: InDoubt | None = None) -> int:
    """Round 1 starts a lookup; round 2's read begins before it resolves and returns after
    (with ``again`` put back in doubt meanwhile, when given)."""
    lookup.go.clear()
    assert await verifier.start_round() == 1
    await until(lambda: len(lookup.asked) == 1)
    sweeps.gate.clear()
    sweeps.reading.clear()
    second = asyncio.create_task(verifier.start_round())
    await sweeps.reading.wait()
    assert not sweeps.resolved, "round 2's read began before the lookup resolved"
    lookup.go.set()
    await until(lambda: verifier.in_flight == 0)
    if again is not None:
        sweeps.items[again.item_id] = again
    sweeps.gate.set()
    return await asyncio.wait_for(second, 5)


def test_an_item_whose_lookup_finished_during_the_read_is_not_looked_up_again_that_round() -> None:
    async def scenario() -> None:
        x = InDoubt("x", "g", "kx", NOW)
        sweeps, lookup = SlowSweeps([x]), Lookup()
        verifier = Verifier(sweeps, lookup, concurrency=4, timeout_s=5, clock=lambda: NOW)
        assert await _round_while_a_lookup_finishes(sweeps, verifier, lookup) == 0, "its episode was just resolved"
        assert lookup.asked == ["kx"] and sweeps.resolved == [x]
        assert verifier.in_flight == 0
        await verifier.close()

    asyncio.run(scenario())


def test_a_newer_episode_of_the_item_is_looked_up_in_the_same_round() -> None:
    async def scenario() -> None:
        x = InDoubt("x", "g", "kx", NOW)
        again = InDoubt("x", "g", "kx", NOW + timedelta(seconds=30))  # sent again, in doubt again
        sweeps, lookup = SlowSweeps([x], snapshot_first=False), Lookup()
        verifier = Verifier(sweeps, lookup, concurrency=4, timeout_s=5, clock=lambda: NOW)
        assert await _round_while_a_lookup_finishes(sweeps, verifier, lookup, again) == 1
        await until(lambda: verifier.in_flight == 0)
        assert lookup.asked == ["kx", "kx"] and sweeps.resolved == [x, again]
        await verifier.close()

    asyncio.run(scenario())


def test_the_next_round_asks_again_about_an_item_left_in_doubt() -> None:
    """What a lookup left undecided is asked again by the next round, as before."""
    async def scenario() -> None:
        x = InDoubt("x", "g", "kx", NOW)
        sweeps = SlowSweeps([x], decide=False)
        lookup = Lookup()
        verifier = Verifier(sweeps, lookup, concurrency=4, timeout_s=5, clock=lambda: NOW)
        assert await verifier.start_round() == 1
        await until(lambda: verifier.in_flight == 0)
        assert await verifier.start_round() == 1
        await until(lambda: verifier.in_flight == 0)
        assert lookup.asked == ["kx", "kx"]
        await verifier.close()

    asyncio.run(scenario())

