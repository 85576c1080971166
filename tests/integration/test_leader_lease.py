"""Leadership is a lease row with a TTL: one holder at a time, taken over once it runs out,
and a write fenced by an old epoch is refused; the reconciler's segment leases are the same
rows, one per segment."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from typing import NamedTuple

import psycopg
import pytest

from pacer_common.db.leader import LeaderLock, LeadershipLost, fence
from pacer_common.db.pool import open_pool
from pacer_reconciler.adapters.postgres import PostgresLog
from pacer_reconciler.adapters.segments import SegmentLeases
from pacer_reconciler.ports import Position
from tests.integration.helpers import eventually

TTL = 1.0
POLL_S = 0.05  # how often eventually (tests.integration.helpers) asks again
# A take's transaction starts (taken_at) a moment before its statement compares the old
# expiry with the clock; the lower bound allows that moment, not a takeover before expiry.
CHECK_LAG = timedelta(milliseconds=5)


class Lease(NamedTuple):
    """A lease row as the database has it: its times are the database's clock."""
    holder: str
    epoch: int
    taken_at: datetime
    expires_at: datetime


def _leases(url: str, *names: str) -> list[Lease]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT name, holder, epoch, taken_at, expires_at FROM leader_leases"
                            " WHERE name = ANY(%s)", (list(names),)).fetchall()
    found = {r[0]: Lease(r[1], int(r[2]), r[3], r[4]) for r in rows}
    assert set(found) == set(names), f"lease rows missing: {set(names) - set(found)}"
    return [found[n] for n in names]


def _took_over(new: Lease, old: Lease, *, freed_at: datetime, ttl_s: float, attempts_every_s: float) -> None:
    """``new`` is ``old``'s lease taken over at the next epoch, once ``old`` had expired by the
    database's clock, and at the new holder's first attempt after what held it back expired
    (``freed_at``: the old lease, or the last of the frozen holder's rows): no later than one
    gap between its attempts (``attempts_every_s``) plus one attempt's budget (a third of the
    TTL) after that. Both bounds are between timestamps on the database's clock."""
    assert new.holder != old.holder and new.epoch == old.epoch + 1, (old, new)
    assert new.taken_at >= old.expires_at - CHECK_LAG, \
        f"taken over {old.expires_at - new.taken_at} before the old lease expired"
    latest = freed_at + timedelta(seconds=attempts_every_s + ttl_s / 3)
    assert new.taken_at <= latest, \
        f"taken over {new.taken_at - freed_at} after the old lease expired, not at the next attempt"


def _cursor(url: str) -> tuple[str, int] | None:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT last_xid::text, last_seq FROM log_cursors WHERE name = 'reconciler'").fetchone()
    return (row[0], row[1]) if row else None


def test_one_holder_at_a_time_and_the_standby_takes_over_once_the_lease_runs_out(database_url: str) -> None:
    # The holder must renew within a third of the TTL every time, or its lease rightly lapses.
    # At 1 s that is 0.33 s, which a busy two-core machine now and then misses; this test is
    # about renewing on time, so it gives each renewal a second.
    ttl = 3 * TTL

    async def scenario() -> None:
        a, b = LeaderLock(database_url, "t", ttl_s=ttl), LeaderLock(database_url, "t", ttl_s=ttl)
        try:
            assert await a.hold() and a.epoch == 1
            assert not await b.hold(), "a live lease is not taken"
            # a keeps renewing for longer than the TTL: b never gets it
            deadline = time.monotonic() + 2 * ttl
            while time.monotonic() < deadline:
                assert await a.hold()
                assert not await b.hold()
                await asyncio.sleep(ttl / 6)
            # a freezes (stops renewing): b takes over once the lease has run out, at a new epoch,
            # at its first attempt after (b tries every ttl/3, as the test asks every POLL_S).
            (old,) = _leases(database_url, "t")
            assert (old.holder, old.epoch) == (a.holder, 1)
            await eventually(b.hold, timeout_s=3 * ttl)
            (new,) = _leases(database_url, "t")
            _took_over(new, old, freed_at=old.expires_at, ttl_s=ttl, attempts_every_s=ttl / 3 + POLL_S)
            assert b.epoch == new.epoch == 2 and new.holder == b.holder
            assert not a.is_leader, "the frozen holder's own clock has already ended its term"
            assert not await a.hold(), "a resumed old holder steps down"
            assert a.epoch is None
        finally:
            await a.release()
            await b.release()

    asyncio.run(scenario())


def test_release_hands_over_at_once(database_url: str) -> None:
    async def scenario() -> None:
        a, b = LeaderLock(database_url, "t", ttl_s=30), LeaderLock(database_url, "t", ttl_s=30)
        try:
            assert await a.hold()
            await a.release()
            assert await b.hold(), "a released lease is free without waiting for its TTL"
            assert b.epoch == 2
        finally:
            await b.release()

    asyncio.run(scenario())


def test_a_cursor_write_under_an_old_epoch_is_refused(database_url: str) -> None:
    async def scenario() -> None:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        a = LeaderLock(database_url, "pacer-reconciler", ttl_s=TTL)
        b = LeaderLock(database_url, "pacer-reconciler", ttl_s=TTL)
        old, new = (PostgresLog(pool, "reconciler", timedelta(seconds=60), leader=lease) for lease in (a, b))
        try:
            assert await a.hold()
            await old.commit_batch([], Position("0", 0), Position("5", 1))
            stale_epoch = a.epoch
            await eventually(b.hold, timeout_s=3 * TTL)  # a froze; b took over
            a.epoch = stale_epoch  # a wakes up mid-batch, still believing in its epoch
            with pytest.raises(LeadershipLost):
                await old.commit_batch([], Position("5", 1), Position("6", 1))
            assert _cursor(database_url) == ("5", 1), "the old leader's batch was not applied"
            await new.commit_batch([], Position("5", 1), Position("6", 1))
            assert _cursor(database_url) == ("6", 1)
        finally:
            await a.release()
            await b.release()
            await pool.close()

    asyncio.run(scenario())


def test_a_leader_frozen_inside_its_fenced_transaction_does_not_block_the_takeover(database_url: str) -> None:
    """The fence's row lock dies with the frozen transaction (idle_in_transaction_session_timeout,
    as the reconciler sets it), so the standby still takes over within the bound."""

    async def scenario() -> None:
        a, b = LeaderLock(database_url, "t", ttl_s=TTL), LeaderLock(database_url, "t", ttl_s=TTL)
        frozen = await psycopg.AsyncConnection.connect(
            database_url, options=f"-c idle_in_transaction_session_timeout={int(TTL * 500)}")
        try:
            assert await a.hold()
            await fence(frozen, "t", a.epoch)  # opens a transaction holding the lease row: then a freezes
            (old,) = _leases(database_url, "t")
            assert old.holder == a.holder
            await eventually(b.hold, timeout_s=4 * TTL)
            (new,) = _leases(database_url, "t")
            _took_over(new, old, freed_at=old.expires_at, ttl_s=TTL, attempts_every_s=TTL / 3 + POLL_S)
            assert b.epoch == new.epoch == 2
        finally:
            await frozen.close()
            await a.release()
            await b.release()

    asyncio.run(scenario())


def test_segment_leases_split_fail_over_within_the_bound_and_fence_the_old_owner(database_url: str) -> None:
    """The leader lease generalised to one row per segment: two replicas split four segments,
    one freezes and the other takes its two over once they expired, at its first round after
    the frozen one's rows (its segments and its membership) expired, and a cursor write under
    the frozen one's epoch is refused."""

    async def scenario() -> None:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        a = SegmentLeases(database_url, "pacer-reconciler", 4, ttl_s=TTL)
        b = SegmentLeases(database_url, "pacer-reconciler", 4, ttl_s=TTL)
        try:
            assert await a.step() and a.owned() == [0, 1, 2, 3], "alone, a replica takes every segment"
            await b.step()
            assert b.replicas == 2 and b.owned() == [], "a newcomer finds none free"
            await a.step()
            assert a.owned() == [0, 1], "the surplus is released, segment 0 kept"
            await b.step()
            assert b.owned() == [2, 3]
            old = PostgresLog(pool, "reconciler/0of4", timedelta(seconds=60), leader=a.lease(0), segments=4)
            await old.commit_batch([], Position("0", 0), Position("5", 1))
            stale = a.lease(0).epoch

            async def b_holds_all() -> bool:  # a froze: only b runs its rounds
                await b.step()
                return b.owned() == [0, 1, 2, 3]

            names = (a.lease(0).name, a.lease(1).name, a.member)
            frozen = _leases(database_url, *names)
            assert all(row.holder == a.holder for row in frozen)
            # b counts a as a replica, so leaves its segments alone, until a's membership expired
            # too; b's rounds follow each other every POLL_S.
            await eventually(b_holds_all, timeout_s=4 * TTL)
            freed_at = max(row.expires_at for row in frozen)
            for was, now in zip(frozen[:2], _leases(database_url, *names[:2]), strict=True):
                _took_over(now, was, freed_at=freed_at, ttl_s=TTL, attempts_every_s=POLL_S)
            assert not a.owned(), "the frozen replica's own clock has ended its terms"
            a.lease(0).epoch = stale  # a wakes up mid-batch, still believing in its epoch
            with pytest.raises(LeadershipLost):
                await old.commit_batch([], Position("5", 1), Position("6", 1))
            new = PostgresLog(pool, "reconciler/0of4", timedelta(seconds=60), leader=b.lease(0), segments=4)
            await new.commit_batch([], Position("5", 1), Position("6", 1))
            a.lease(0).epoch = None
            await a.step()  # a rejoins: b gives the surplus back
            await b.step()
            await a.step()
            assert (a.owned(), b.owned()) == ([2, 3], [0, 1])
        finally:
            await a.release()
            await b.release()
            await pool.close()

    asyncio.run(scenario())


def test_a_replicas_membership_is_renewed_while_it_is_live(database_url: str) -> None:
    """Each round renews the replica's membership row before it expires: were it renewed only
    once expired, peers would count one replica fewer from then until its next round and
    claim segments that are its share."""

    def membership(name: str) -> tuple[datetime, int]:
        with psycopg.connect(database_url) as conn:
            row = conn.execute("SELECT expires_at, epoch FROM leader_leases WHERE name = %s", (name,)).fetchone()
        assert row is not None, f"no row {name}"
        return row[0], int(row[1])

    async def scenario() -> None:
        a = SegmentLeases(database_url, "pacer-reconciler", 2, ttl_s=30.0)  # live throughout the test
        try:
            assert await a.step()
            first, epoch = membership(a.member)
            assert await a.step()
            renewed, same = membership(a.member)
            assert renewed > first, "a live membership's expiry moves on at each round"
            assert same == epoch, "a renewal, not a takeover"
        finally:
            await a.release()

    asyncio.run(scenario())
