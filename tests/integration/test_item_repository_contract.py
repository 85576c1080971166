"""The sender's item repository contract, run against the in-memory fake the unit tests use
and the Postgres adapter (the stored functions behind it): claim and submit in one step, one
send per key, fenced outcomes, and expiry of pending items only."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from pacer_common.db.pool import open_pool
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.status import ItemStatus as S
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.domain.decisions import Decision
from pacer_sender.ports import ItemRepository
from tests.integration.helpers import cmd, contract, seed_job
from tests.unit.fakes import InMemoryItemRepository

OK = Receipt(0, "ok", "m-1", 1.0)
RETRY = Decision(S.WAITING_RETRY, "ItemRetryScheduled", "retryable", "busy", release_ledger=True)


@dataclass
class Subject:
    repo: ItemRepository
    items: list[str]  # pending items of guid g1, whose lease sender w1 holds
    status: Callable[[str], Awaitable[str]]
    ledger: Callable[[str], Awaitable[str | None]]  # a key's ledger state, None when free
    set_expiry: Callable[[str, datetime], Awaitable[None]]  # an item's expire_at, as its row holds it


@asynccontextmanager
async def memory(n: int) -> AsyncIterator[Subject]:
    fake = InMemoryItemRepository()
    items = [str(uuid.uuid4()) for _ in range(n)]
    for i in items:
        fake.add(i)

    async def status(item: str) -> str:
        return fake.items[item].status.value

    async def ledger(key: str) -> str | None:
        entry = fake.ledger.get(key)
        return None if entry is None else entry.state

    async def set_expiry(item: str, at: datetime) -> None:
        fake.items[item].expire_at = at

    yield Subject(fake, items, status, ledger, set_expiry)


@asynccontextmanager
async def postgres(url: str, n: int) -> AsyncIterator[Subject]:
    _, _, items = seed_job(url, {"g1": n})
    pool = await open_pool(url, min_size=1, max_size=4)
    await PostgresGuidLeases(pool, timedelta(seconds=30)).acquire(["g1"], "w1")

    async def status(item: str) -> str:
        with psycopg.connect(url) as conn:
            return str(conn.execute("SELECT status FROM items WHERE item_id = %s", (item,)).fetchone()[0])

    async def ledger(key: str) -> str | None:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT state FROM send_ledger WHERE idem_key = %s", (key,)).fetchone()
        return None if row is None else str(row[0])

    async def set_expiry(item: str, at: datetime) -> None:
        with psycopg.connect(url) as conn:
            conn.execute("UPDATE items SET expire_at = %s WHERE item_id = %s", (at, item))

    try:
        yield Subject(PostgresItemRepository(pool, timedelta(seconds=30)), items, status, ledger, set_expiry)
    finally:
        await pool.close()


Scenario = Callable[[Subject], Awaitable[None]]


@pytest.fixture(params=["memory", "postgres"])
def run(request: pytest.FixtureRequest) -> Callable[[int, Scenario], None]:
    """Run a scenario, with ``n`` pending items, against one implementation of the port."""
    return contract(request, memory, postgres)


def test_begin_send_claims_and_submits_a_pending_item_once(run: Callable[[int, Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        (item,) = s.items
        first = await s.repo.begin_send(cmd(item, "k1"), "w1")
        assert (first.outcome, first.epoch, first.attempts) == ("submitted", 1, 0)
        assert (await s.status(item), await s.ledger("k1")) == ("submitted", "reserved")
        assert (await s.repo.begin_send(cmd(item, "k1"), "w1")).outcome == "not_pending"

    run(1, scenario)


def test_a_second_item_with_a_taken_key_is_abandoned_unsent(run: Callable[[int, Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        first, second = s.items
        await s.repo.begin_send(cmd(first, "same"), "w1")
        dup = await s.repo.begin_send(cmd(second, "same"), "w1")
        assert (dup.outcome, dup.holder) == ("duplicate", first)
        assert await s.status(second) == "abandoned"

    run(2, scenario)


def test_confirm_needs_the_epoch_of_the_send_and_marks_the_key_sent(run: Callable[[int, Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        (item,) = s.items
        begun = await s.repo.begin_send(cmd(item, "k1"), "w1")
        assert begun.epoch is not None
        assert await s.repo.confirm(cmd(item, "k1"), begun.epoch + 1, OK) is False, "fenced"
        assert await s.status(item) == "submitted"
        assert await s.repo.confirm(cmd(item, "k1"), begun.epoch, OK) is True
        assert (await s.status(item), await s.ledger("k1")) == ("confirmed", "sent")

    run(1, scenario)


def test_settle_needs_the_epoch_of_the_send_and_a_retry_frees_the_key(run: Callable[[int, Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        (item,) = s.items
        begun = await s.repo.begin_send(cmd(item, "k1"), "w1")
        assert begun.epoch is not None
        assert await s.repo.settle(cmd(item, "k1"), begun.epoch - 1, RETRY) is False, "fenced"
        assert await s.repo.settle(cmd(item, "k1"), begun.epoch, RETRY) is True
        assert (await s.status(item), await s.ledger("k1")) == ("waiting_retry", None)

    run(1, scenario)


def test_only_a_pending_item_expires(run: Callable[[int, Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        pending, sent = s.items
        await s.repo.begin_send(cmd(sent, "k-sent"), "w1")
        assert await s.repo.expire(cmd(pending, "k-pending")) is True
        assert await s.repo.expire(cmd(sent, "k-sent")) is False
        assert (await s.status(pending), await s.status(sent)) == ("expired", "submitted")

    run(2, scenario)


def test_an_item_within_a_second_of_its_expire_at_is_expired_at_its_claim_never_sent(
        run: Callable[[int, Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        soon, later = s.items
        now = datetime.now(UTC)
        await s.set_expiry(soon, now + timedelta(milliseconds=500))
        await s.set_expiry(later, now + timedelta(minutes=5))
        expired = await s.repo.begin_send(cmd(soon, "k-soon"), "w1")
        assert (expired.outcome, expired.epoch) == ("expired", None)
        assert (await s.status(soon), await s.ledger("k-soon")) == ("expired", None)
        assert (await s.repo.begin_send(cmd(later, "k-later"), "w1")).outcome == "submitted"

    run(2, scenario)
