"""The guid lease store's contract, run against the in-memory fake the unit tests use and the
Postgres adapter the sender runs: the fake cannot drift from the real rules unnoticed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

import pytest

from pacer_common.db.pool import open_pool
from pacer_sender.adapters.postgres import PostgresGuidLeases
from pacer_sender.ports import GuidLeaseStore, Slowdown
from tests.integration.helpers import contract
from tests.unit.fakes import InMemoryGuidLeases

TTL_S = 30.0


@dataclass
class Subject:
    store: GuidLeaseStore
    expire: Callable[[str], Awaitable[None]]  # let the guid's lease run out


@asynccontextmanager
async def memory() -> AsyncIterator[Subject]:
    fake = InMemoryGuidLeases(ttl=TTL_S)

    async def expire(guid: str) -> None:
        fake.now = fake.rows[guid].until + 1

    yield Subject(fake, expire)


@asynccontextmanager
async def postgres(url: str) -> AsyncIterator[Subject]:
    pool = await open_pool(url, min_size=1, max_size=2)

    async def expire(guid: str) -> None:
        async with pool.connection() as conn:
            await conn.execute("UPDATE guid_leases SET lease_until = now() - interval '1 second' WHERE guid = %s",
                               (guid,))

    try:
        yield Subject(PostgresGuidLeases(pool, timedelta(seconds=TTL_S)), expire)
    finally:
        await pool.close()


Scenario = Callable[[Subject], Awaitable[None]]


@pytest.fixture(params=["memory", "postgres"])
def run(request: pytest.FixtureRequest) -> Callable[[Scenario], None]:
    """Run a scenario against one implementation of the port."""
    return contract(request, memory, postgres)


def test_free_guids_are_granted_at_epoch_one_without_a_takeover(run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        got = await s.store.acquire(["g1", "g2"], "w1")
        assert sorted((g.guid, g.epoch, g.took_over) for g in got) == [("g1", 1, False), ("g2", 1, False)]

    run(scenario)


def test_a_live_lease_is_not_granted_to_another_owner(run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        await s.store.acquire(["g1"], "w1")
        assert [g.guid for g in await s.store.acquire(["g1", "g2"], "w2")] == ["g2"]
        assert await s.store.acquire(["g1"], "w2") == []

    run(scenario)


def test_the_owner_acquiring_again_keeps_its_epoch(run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        (first,) = await s.store.acquire(["g1"], "w1")
        (again,) = await s.store.acquire(["g1"], "w1")
        assert (again.epoch, again.took_over) == (first.epoch, False)

    run(scenario)


def test_renew_keeps_only_the_leases_held_by_this_owner_at_this_epoch(run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        (g1,) = await s.store.acquire(["g1"], "w1")
        (g2,) = await s.store.acquire(["g2"], "w1")
        assert set(await s.store.renew({"g1": g1.epoch, "g2": g2.epoch + 1}, "w1")) == {"g1"}
        assert not await s.store.renew({"g1": g1.epoch}, "w2")

    run(scenario)


def test_release_frees_only_the_owners_leases_and_the_next_owner_gets_a_new_epoch(
        run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        (first,) = await s.store.acquire(["g1"], "w1")
        assert await s.store.release(["g1"], "w2") == 0, "not w2's to release"
        assert await s.store.release(["g1"], "w1") == 1
        (second,) = await s.store.acquire(["g1"], "w2")
        assert (second.epoch, second.took_over) == (first.epoch + 1, False), "released, not taken over"

    run(scenario)


def test_an_expired_lease_is_taken_over_with_a_new_epoch(run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        (first,) = await s.store.acquire(["g1"], "w1")
        await s.expire("g1")
        (taken,) = await s.store.acquire(["g1"], "w2")
        assert (taken.epoch, taken.took_over) == (first.epoch + 1, True)
        assert not await s.store.renew({"g1": first.epoch}, "w1"), "the old owner's renewal is refused"

    run(scenario)


def test_a_penalty_written_under_the_epoch_held_reaches_the_next_owner_and_a_stale_one_does_not(
        run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        (first,) = await s.store.acquire(["g1"], "w1")
        assert first.penalty is None, "a guid never rate-limited has none"
        await s.store.penalize({"g1": Slowdown(first.epoch, 4.0)})
        assert await s.store.release(["g1"], "w1") == 1
        await s.store.penalize({"g1": Slowdown(first.epoch, 8.0)})  # written just after the release: still its row
        (second,) = await s.store.acquire(["g1"], "w2")
        assert second.penalty == 8.0, "the next owner resumes the guid at its penalty"
        await s.store.penalize({"g1": Slowdown(first.epoch, 2.0)})  # the previous owner's, too late
        (kept,) = await s.store.acquire(["g1"], "w2")
        assert kept.penalty == 8.0, "a penalty written under an epoch no longer the row's is refused"
        await s.store.penalize({"g1": Slowdown(second.epoch, 1.0)})  # back to its own pace: cleared
        (again,) = await s.store.acquire(["g1"], "w2")
        assert again.penalty is None, "1 clears it"

    run(scenario)


def test_a_quiet_the_gateway_asked_for_reaches_the_next_owner_as_what_is_left_of_it(
        run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        (first,) = await s.store.acquire(["g1"], "w1")
        assert first.quiet_s is None, "a guid never asked for quiet has none"
        await s.store.penalize({"g1": Slowdown(first.epoch, 2.0, 60.0)})
        await s.expire("g1")  # its holder killed: the lease runs out, nobody released it
        (second,) = await s.store.acquire(["g1"], "w2")
        assert second.took_over
        assert second.quiet_s is not None and 0 < second.quiet_s <= 60.0, second.quiet_s
        await s.store.penalize({"g1": Slowdown(first.epoch, 8.0, 600.0)})  # the previous owner's, late
        (kept,) = await s.store.acquire(["g1"], "w2")
        assert kept.penalty == 2.0, "a penalty under an epoch no longer the row's is refused"
        assert kept.quiet_s is not None and 500 < kept.quiet_s <= 600.0, "the gateway's quiet is kept whoever asks"
        await s.store.penalize({"g1": Slowdown(second.epoch, 2.0, None)})  # a write that knows of no quiet
        (again,) = await s.store.acquire(["g1"], "w2")
        assert again.penalty == 2.0
        assert again.quiet_s is not None and 500 < again.quiet_s <= 600.0, "a quiet on the row is never shortened"
        renewed = await s.store.renew({"g1": again.epoch}, "w2")
        assert renewed["g1"] is not None and 500 < renewed["g1"] <= 600.0, "each renewal says what is left of it"
        await s.store.penalize({"g1": Slowdown(second.epoch, 2.0, 900.0)})  # the gateway asked again, longer
        (longer,) = await s.store.acquire(["g1"], "w2")
        assert longer.quiet_s is not None and 800 < longer.quiet_s <= 900.0

    run(scenario)


def test_a_quiet_written_late_is_what_was_left_of_it_when_the_statement_goes(run: Callable[[Scenario], None]) -> None:
    """A quiet reckoned as 1,000 s, written 300 s later (a wait for a connection, retries):
    the row keeps 700 s of it, not a quiet that ends 300 s later than the gateway asked; one
    whose whole time went by before the write is none."""
    async def scenario(s: Subject) -> None:
        leases = {lease.guid: lease for lease in await s.store.acquire(["g1", "g2"], "w1")}
        await s.store.penalize({"g1": Slowdown(leases["g1"].epoch, 2.0, 1000.0),
                                "g2": Slowdown(leases["g2"].epoch, 2.0, 200.0)}, lambda: 300.0)
        after = {lease.guid: lease.quiet_s for lease in await s.store.acquire(["g1", "g2"], "w1")}
        assert after["g1"] is not None and 690 < after["g1"] <= 700.0, after
        assert after["g2"] is None, after

    run(scenario)
