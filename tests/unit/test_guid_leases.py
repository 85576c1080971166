"""The guid lease renewal rule: a lease is kept only while its owner AND epoch are ours, so a
forced release evicts its holder instead of being taken back by the next renewal."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_sender.leases import GuidLeases

from .dispatching import until
from .fakes import InMemoryGuidLeases


def run(coro):
    return asyncio.run(coro)


def test_a_force_released_holder_loses_the_guid_at_its_next_renewal() -> None:
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)
    assert run(a.acquire("g1")) is not None
    assert store.force_release("g1")
    run(a.renew())
    assert "g1" not in a.held and a.lost == 1
    assert store.rows["g1"].owner is None  # the renewal did not take it back


def test_a_renewal_never_takes_a_released_lease_even_once_the_eviction_has_run_out() -> None:
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)
    run(a.acquire("g1"))
    store.force_release("g1")
    store.now = 40  # a renewal that is late, past evicted_until: acquiring would succeed now
    run(a.renew())
    assert "g1" not in a.held and store.rows["g1"].owner is None


def test_a_renewal_keeps_a_lease_whose_owner_and_epoch_are_unchanged() -> None:
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)
    run(a.acquire("g1"))
    store.now = 25
    run(a.renew())
    assert a.held == {"g1": 1} and store.rows["g1"].until == 55


def test_the_evicted_holder_may_not_take_the_guid_back_before_its_old_lease_would_have_run_out() -> None:
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)
    run(a.acquire("g1"))
    store.force_release("g1")
    store.now = 29
    run(a.renew())
    assert run(a.acquire("g1")) is None
    store.now = 31
    back = run(a.acquire("g1"))
    assert back is not None and back.epoch == 3  # taken, released (2), taken again (3)


def test_another_sender_takes_a_released_guid_once_the_evicted_holders_send_has_settled() -> None:
    store = InMemoryGuidLeases(ttl=30)
    a, b = GuidLeases(store, "a", 30), GuidLeases(store, "b", 30)
    run(a.acquire("g1"))
    store.in_flight.add(("g1", "a"))
    store.force_release("g1")
    assert run(b.acquire("g1")) is None  # a's request may still be on the wire
    store.in_flight.clear()
    taken = run(b.acquire("g1"))
    assert taken is not None and not taken.took_over  # released, so not a takeover of a live lease
    run(a.renew())
    assert "g1" not in a.held and b.held == {"g1": 3}


def test_a_guid_taken_again_while_a_renewal_ran_is_not_forgotten_by_that_renewal() -> None:
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)
    run(a.acquire("g1"))
    store.force_release("g1")
    renew = store.renew

    async def slow_renew(held, owner):
        kept = await renew(held, owner)
        store.now = 31  # meanwhile the eviction ran out and the worker took the guid again
        await a.acquire("g1")
        return kept

    store.renew = slow_renew  # type: ignore[method-assign]  # a slow renewal patched in to race the eviction
    run(a.renew())
    assert a.held == {"g1": 3}


OPS = st.lists(st.tuples(st.sampled_from(["acquire", "renew", "release", "force", "tick"]),
                         st.sampled_from(["a", "b", "c"]), st.sampled_from(["g1", "g2"])), max_size=40)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_after_renewals_only_the_recorded_owner_believes_it_holds_a_guid(ops: list[tuple[str, str, str]]) -> None:
    store = InMemoryGuidLeases(ttl=30)
    senders = {n: GuidLeases(store, n, 30) for n in "abc"}

    async def play() -> None:
        for op, who, guid in ops:
            s = senders[who]
            if op == "acquire":
                await s.acquire(guid)
            elif op == "renew":
                await s.renew()
            elif op == "release":
                await s.release([guid])
            elif op == "force":
                store.force_release(guid)
            else:
                store.now += 11
            for other in senders.values():
                await other.renew()
            for name, other in senders.items():
                for g, epoch in other.held.items():
                    row = store.rows[g]
                    assert (row.owner, row.epoch) == (name, epoch), (name, g, epoch, row)

    run(play())


def test_leases_handed_back_in_the_same_instant_go_back_in_one_statement() -> None:
    # A rebalance: every worker of a revoked partition hands its guid back at once.
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)
    calls: list[list[str]] = []
    release = store.release

    async def counted(guids, owner):
        calls.append(list(guids))
        return await release(guids, owner)

    store.release = counted  # type: ignore[method-assign]
    guids = [f"g{k}" for k in range(300)]

    async def scenario() -> None:
        for g in guids:
            assert await a.acquire(g) is not None
        await asyncio.gather(*(a.release([g]) for g in guids))

    run(scenario())
    assert sorted(g for c in calls for g in c) == sorted(guids)
    assert len(calls) == 1, [len(c) for c in calls]
    assert a.held == {} and all(store.rows[g].owner is None for g in guids)


def test_a_guid_given_back_carries_its_penalty_to_the_next_owner_before_the_renewal_would() -> None:
    store = InMemoryGuidLeases(ttl=30)
    a, b = GuidLeases(store, "a", 30), GuidLeases(store, "b", 30)
    run(a.acquire("g1"))
    a.penalized("g1", 4.0)
    run(a.release(["g1"]))  # a rebalance, long before the next renewal
    taken = run(b.acquire("g1"))
    assert taken is not None and taken.penalty == 4.0
    b.penalized("g1", 2.0)
    store.force_release("g1")
    run(b.write_penalties())
    assert store.rows["g1"].penalty == 4.0, "written under an epoch no longer the row's: refused"
    assert not b.penalties, "nor kept to be written again"


def test_a_quiet_the_gateway_asked_for_reaches_the_next_owner_as_what_is_left_of_it() -> None:
    """The holder's clock says when the quiet ends; the row is given what is left of it at the
    write, and the next owner what is left at its take."""
    store = InMemoryGuidLeases(ttl=30)
    clock = [1000.0]
    a, b = GuidLeases(store, "a", 30), GuidLeases(store, "b", 30)
    a.clock = lambda: clock[0]
    run(a.acquire("g1"))
    a.penalized("g1", 2.0, quiet_until=1060.0)  # a Retry-After of 60 s, answered at 1000
    clock[0] = 1010.0
    run(a.write_penalties())
    assert store.rows["g1"].quiet_until == store.now + 50.0
    store.now += 45.0  # a killed, its lease expired
    taken = run(b.acquire("g1"))
    assert taken is not None and taken.quiet_s == pytest.approx(5.0)
    b.penalized("g1", 2.0, quiet_until=b.clock() - 1.0)  # a write that knows of no quiet left
    run(b.write_penalties())
    assert store.rows["g1"].quiet_until == store.now + 5.0, "a quiet on the row is never shortened"
    store.now += 6.0
    again = run(b.acquire("g1"))
    assert again is not None and again.quiet_s is None, "over"


def test_a_renewal_passes_on_a_quiet_another_caller_left_on_a_held_guid_s_row() -> None:
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)
    told: list[tuple[str, float]] = []
    a.quiet = lambda guid, seconds: told.append((guid, seconds))
    run(a.acquire("g1"))
    run(a.acquire("g2"))
    run(a.renew())
    assert told == []
    store.rows["g2"].quiet_until = store.now + 40.0  # a reconciler's lookup was asked for quiet
    run(a.renew())
    assert told == [("g2", 40.0)]


def test_penalties_a_failed_write_left_are_written_with_the_next_one() -> None:
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)
    run(a.acquire("g1"))
    run(a.acquire("g2"))
    a.penalized("g1", 4.0)
    real, calls = store.penalize, []

    async def down(penalties: object, since: object = None) -> None:
        calls.append(penalties)
        raise ConnectionError("the database is away")

    store.penalize = down  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        run(a.write_penalties())
    store.penalize = real  # type: ignore[method-assign]
    a.penalized("g2", 2.0)
    run(a.write_penalties())
    assert (store.rows["g1"].penalty, store.rows["g2"].penalty) == (4.0, 2.0)


def test_a_release_waits_for_the_penalty_write_under_way_before_giving_the_guid_back() -> None:
    """The renewal's write has taken the guid's penalty and is still running when a rebalance
    gives the guid back: the release goes after it, or the next owner would read the row first."""
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)
    order: list[str] = []

    class Watched(asyncio.Lock):
        """The writes' lock, counting who asked for it."""
        asked = 0

        async def acquire(self) -> Literal[True]:
            Watched.asked += 1
            return await super().acquire()

    async def scenario() -> None:
        a._writing = Watched()
        await a.acquire("g1")
        a.penalized("g1", 4.0)
        entered, slow_write = asyncio.Event(), asyncio.Event()
        real_penalize, real_release = store.penalize, store.release

        async def penalize(penalties: Any, since: Any = lambda: 0.0) -> None:
            entered.set()
            await slow_write.wait()
            order.append("penalty")
            await real_penalize(penalties, since)

        async def release(guids: Any, owner: str) -> int:
            order.append("release")
            return await real_release(guids, owner)

        store.penalize, store.release = penalize, release  # type: ignore[method-assign]
        writing = asyncio.ensure_future(a.write_penalties())
        await asyncio.wait_for(entered.wait(), 5)  # the write has taken the penalty, waits on the database
        assert not a.penalties
        releasing = asyncio.ensure_future(a.release(["g1"]))
        await until(lambda: Watched.asked == 2 or bool(order))  # the release waits for the write, or went
        slow_write.set()
        await asyncio.gather(writing, releasing)

    run(scenario())
    assert order == ["penalty", "release"]


def test_a_penalty_that_rose_is_written_at_once_and_one_that_fell_waits_for_the_renewal() -> None:
    """A rate limit's penalty reaches the row before any renewal (a sender killed a moment
    later leaves it to the next owner); the clean sends' decay is written with the renewal."""
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)

    async def scenario() -> tuple[float | None, float | None, float | None]:
        await a.acquire("g1")
        a.penalized("g1", 4.0, rose=True)
        await until(lambda: store.rows["g1"].penalty is not None)
        risen = store.rows["g1"].penalty
        a.penalized("g1", 2.0)  # decayed by a clean send
        await a.close()
        fell = store.rows["g1"].penalty
        await a.write_penalties()  # the renewal's
        return risen, fell, store.rows["g1"].penalty

    assert run(scenario()) == (4.0, 4.0, 2.0)


def test_penalties_that_rise_while_a_write_is_under_way_are_written_right_after_it() -> None:
    """A storm of rate limits: one write at a time, each taking every rise since the last."""
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)
    writes: list[list[str]] = []

    async def scenario() -> None:
        for g in ("g1", "g2", "g3"):
            await a.acquire(g)
        entered, go_on = asyncio.Event(), asyncio.Event()
        real = store.penalize

        async def slow(penalties: Any, since: Any = lambda: 0.0) -> None:
            writes.append(sorted(penalties))
            entered.set()
            await go_on.wait()
            await real(penalties, since)

        store.penalize = slow  # type: ignore[method-assign]
        a.penalized("g1", 2.0, rose=True)
        await asyncio.wait_for(entered.wait(), 5)
        a.penalized("g2", 2.0, rose=True)
        a.penalized("g3", 4.0, rose=True)
        go_on.set()
        await until(lambda: store.rows["g3"].penalty is not None)
        await a.close()

    run(scenario())
    assert writes == [["g1"], ["g2", "g3"]]
    assert [store.rows[g].penalty for g in ("g1", "g2", "g3")] == [2.0, 2.0, 4.0]


def test_a_prompt_write_that_fails_leaves_its_penalties_to_the_renewal() -> None:
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)
    real, failed = store.penalize, asyncio.Event()

    async def down(penalties: object, since: object = None) -> None:
        failed.set()
        raise ConnectionError("the database is away")

    async def scenario() -> None:
        await a.acquire("g1")
        store.penalize = down  # type: ignore[method-assign]
        a.penalized("g1", 4.0, rose=True)
        await asyncio.wait_for(failed.wait(), 5)
        await a.close()  # logged, not raised
        assert a.penalties == {"g1": (1, 4.0, None)}, "kept for the next write"
        store.penalize = real  # type: ignore[method-assign]
        await a.write_penalties()

    run(scenario())
    assert store.rows["g1"].penalty == 4.0


def test_a_quiet_asked_after_the_lease_was_lost_still_reaches_the_row_and_its_penalty_does_not() -> None:
    """The gateway's 429 came back after this sender's lease of the guid was taken over: the
    penalty is this sender's to write no more, the quiet is the gateway's and goes to the row."""
    store = InMemoryGuidLeases(ttl=30)
    a, b = GuidLeases(store, "a", 30), GuidLeases(store, "b", 30)
    a.clock = lambda: 0.0
    run(a.acquire("g1"))
    store.now += 31.0
    run(b.acquire("g1"))
    a.forget("g1")  # its renewal found the lease gone
    a.penalized("g1", 4.0, quiet_until=20.0)
    run(a.write_penalties())
    assert store.rows["g1"].penalty is None
    assert store.rows["g1"].quiet_until == store.now + 20.0


def test_a_quiet_written_after_a_wait_is_what_was_left_of_it_when_its_statement_goes() -> None:
    """The write of a quiet waits 30 s (for a connection, say): the store is told those 30 s
    went by since the quiet left was reckoned, so the row's quiet ends when the gateway asked."""
    store = InMemoryGuidLeases(ttl=30)
    a = GuidLeases(store, "a", 30)
    clock = [1000.0]
    a.clock = lambda: clock[0]
    real = store.penalize
    seen: list[float] = []

    async def late(penalties: Any, since: Any = lambda: 0.0) -> None:
        clock[0] += 30.0
        seen.append(since())
        await real(penalties, since)

    async def scenario() -> float | None:
        await a.acquire("g1")
        store.penalize = late  # type: ignore[method-assign]
        a.penalized("g1", 2.0, quiet_until=clock[0] + 100.0)
        await a.write_penalties()
        return store.rows["g1"].quiet_until

    until_ = run(scenario())
    assert seen == [30.0]
    assert until_ is not None and abs(until_ - (store.now + 70.0)) < 1.0, until_ - store.now
