"""Idle guids give their leases back: a held lease is a row renewed three times per TTL, so a
sender keeps only the leases of guids with work (or idle for less than ``idle_lease_s``). A
guid that gets work again takes its lease again, and its pacing carries on from this
sender's own record when nobody held the guid in between."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pacer_sender.domain.pacing import GuidPacer, Limits
from pacer_sender.leases import GuidLeases
from pacer_sender.leasing import LeaseKeeper
from pacer_sender.ports import GuidLease

from .dispatching import FAST, cmd, dispatcher, ring, stop, until
from .fakes import InMemoryGuidLeases


def test_a_guid_without_work_gives_its_lease_back_and_a_busy_one_keeps_it() -> None:
    store = InMemoryGuidLeases(ttl=30)

    async def scenario() -> None:
        d, rec, table = dispatcher(FAST, store=store, idle_lease_s=0.2)
        d.leases.ttl_s = 0.3  # a renewal round every 0.1 s
        table["busy"] = Limits(min_interval_s=60, jitter_s=0)  # its second item waits a minute: worker alive
        for c in (cmd("quiet", 0), cmd("busy", 0), cmd("busy", 1)):
            ring(d, rec.store, c)
        await until(lambda: len(rec.sent) == 2 and "quiet" not in d.guids)
        assert set(d.leases.held) == {"quiet", "busy"}, "a guid just done keeps its lease for a while"
        stopping = asyncio.Event()
        renewals = asyncio.create_task(d.leases.keep_renewed(stopping))
        await until(lambda: store.rows["quiet"].owner is None)
        assert set(d.leases.held) == {"busy"} and store.rows["busy"].owner == "me"
        # New work for the quiet guid: its worker takes the lease again and sends.
        ring(d, rec.store, cmd("quiet", 1))
        await until(lambda: len(rec.sent) == 3)
        assert store.rows["quiet"].owner == "me" and "quiet" in d.leases.held
        stopping.set()
        await renewals
        stop(d)

    asyncio.run(scenario())


def test_a_lease_taken_again_at_the_next_epoch_is_regained_any_other_holder_between_is_not() -> None:
    store = InMemoryGuidLeases(ttl=30)
    a, b = GuidLeases(store, "a", 30), GuidLeases(store, "b", 30)

    async def scenario() -> list[bool]:
        seen = []
        for between in ("nobody", "another sender", "a forced release"):
            lease = await a.acquire("g")
            assert lease is not None
            await a.release(["g"])
            if between == "another sender":
                assert await b.acquire("g") is not None
                await b.release(["g"])
            elif between == "a forced release":
                await a.acquire("g")
                store.force_release("g")
                a.forget("g")
                store.rows["g"].evicted_owner = None  # its eviction over
            again = await a.acquire("g")
            assert again is not None
            seen.append(a.regained("g", again.epoch))
            await a.release(["g"])
            a.released_at.clear()
        return seen

    assert asyncio.run(scenario()) == [True, False, False]


class WindowsOnTakeover(InMemoryGuidLeases):
    """Reports five sends this hour on every take, as a lease row that counts all lanes does."""

    async def acquire(self, guids: Sequence[str], owner: str) -> list[GuidLease]:
        return [GuidLease(x.guid, x.epoch, None, x.took_over, x.db_now, {"hour": (5, x.db_now.timestamp() + 60)})
                for x in await super().acquire(guids, owner)]


def test_a_regained_lease_keeps_this_senders_pacing_and_one_taken_over_merges_the_rows() -> None:
    """The row's window counts every lane's sends; merged into this sender's own record they
    would count its replies against the campaign share too. Regained, nothing is merged."""
    store = WindowsOnTakeover(ttl=30)
    keeper = LeaseKeeper(GuidLeases(store, "a", 30), clock=lambda: 100.0)
    limits = Limits(min_interval_s=0, jitter_s=0)

    async def scenario() -> tuple[int, int]:
        first = GuidPacer()
        assert await keeper.take("g", first, limits)  # a first take: the row's record counts
        merged = first.windows["hour"].batch
        await keeper.leases.release(["g"])
        ours = GuidPacer()
        assert await keeper.take("g", ours, limits)
        return merged, ours.windows.get("hour").batch if "hour" in ours.windows else 0

    merged, regained = asyncio.run(scenario())
    assert merged == 5, "a lease taken without this sender's own record takes the row's counts"
    assert regained == 0, "a regained lease leaves this sender's own counts alone"


def test_a_lease_asked_for_while_its_release_runs_is_taken_after_the_release() -> None:
    """Otherwise the release, landing second, would free a lease the sender believes it holds:
    its next send refused, the guid counted lost."""
    store = InMemoryGuidLeases(ttl=30)
    leases = GuidLeases(store, "a", 30)
    gate = asyncio.Event()
    release, acquire = store.release, store.acquire
    order: list[str] = []

    async def slow_release(guids: Sequence[str], owner: str) -> int:
        await gate.wait()
        order.append("release")
        return await release(guids, owner)

    async def noted_acquire(guids: Sequence[str], owner: str) -> list[GuidLease]:
        order.append("acquire")
        return await acquire(guids, owner)

    store.release = slow_release  # type: ignore[method-assign]
    store.acquire = noted_acquire  # type: ignore[method-assign]

    async def scenario() -> None:
        assert await leases.acquire("g") is not None
        order.clear()
        releasing = asyncio.create_task(leases.release(["g"]))
        await until(lambda: "g" not in leases.held)
        taking = asyncio.create_task(leases.acquire("g"))
        # Either the take reached the store, or it waits (in asyncio.wait) for the release.
        await until(lambda: bool(order) or "wait" in _awaiting(taking))
        assert order == [], "the take waits for the release under way"
        gate.set()
        await releasing
        assert await taking is not None

    asyncio.run(scenario())
    assert order == ["release", "acquire"]
    assert store.rows["g"].owner == "a" and "g" in leases.held


def _awaiting(task: asyncio.Task[object]) -> list[str]:
    """The coroutines a suspended task is awaiting, outermost first."""
    names, coro = [], task.get_coro()
    while coro is not None and hasattr(coro, "cr_code"):
        names.append(coro.cr_code.co_name)
        coro = coro.cr_await
    return names


def test_a_guid_taken_back_by_its_own_sender_after_a_quiet_spell_is_no_longer_slowed_by_an_old_rate_limit() -> None:
    """Given back idle at ×32 and taken again by the same sender (its own pacing is the whole
    truth): the penalty is worn by the time the guid was away, as a handed-over one is."""
    store, now = InMemoryGuidLeases(ttl=30), [0.0]
    keeper = LeaseKeeper(GuidLeases(store, "me", 30), clock=lambda: now[0])
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0, max_penalty=32.0, penalty_decay=0.9)
    pacer = GuidPacer(multiplier=32.0, last_any=0.0)

    async def scenario() -> None:
        assert await keeper.take("g", pacer, limits)
        await keeper.leases.release(["g"])
        now[0] = 3600.0
        assert await keeper.take("g", pacer, limits)
        assert keeper.leases.held["g"] == 2 and not keeper.leases.released_at, "regained: nobody held it between"

    asyncio.run(scenario())
    assert pacer.multiplier == 1.0


def test_a_guid_taken_back_by_its_own_sender_keeps_a_quiet_another_caller_left_on_its_row() -> None:
    """Given back idle; meanwhile a reconciler's lookup was asked for 300 s of quiet and wrote
    it to the row. Taken back by the same sender, whose own pacing knew nothing of it: the
    quiet holds the guid's next call all the same."""
    store, now = InMemoryGuidLeases(ttl=30), [0.0]
    keeper = LeaseKeeper(GuidLeases(store, "me", 30), clock=lambda: now[0])
    limits = Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0)
    pacer = GuidPacer(last_any=0.0)

    async def scenario() -> None:
        assert await keeper.take("g", pacer, limits)
        await keeper.leases.release(["g"])
        now[0] = 10.0
        store.rows["g"].quiet_until = store.now + 300.0
        assert await keeper.take("g", pacer, limits)
        assert keeper.leases.held["g"] == 2 and not keeper.leases.released_at, "regained: nobody held it between"

    asyncio.run(scenario())
    assert pacer.ready_at("online", limits, 10.0, 0.0) == 310.0
