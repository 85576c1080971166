"""The guid queue's contract (``GuidQueueStore``), run against the in-memory fake the unit
tests drive the dispatcher with and the Postgres adapter the sender runs: what a guid reads
next, which guids the sweep finds, shedding, and failing an unsent item. (Holds — a paused
job or guid — and the sweep's ``overdue`` flag are the database's alone and are tested in
``test_sender_queue.py``.)"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.rows import dict_row

from pacer_common.db.pool import open_pool
from pacer_common.domain.commands import ItemCommand
from pacer_sender.adapters.queue import PostgresGuidQueue
from pacer_sender.domain.pacing import Drain
from pacer_sender.ports import GuidQueueStore
from tests.integration.helpers import add_job, contract
from tests.unit.fakes import InMemoryGuidQueue

# (guid, n, priority, not_before_in_s, expire_in_s) → the job's pending commands, oldest first
AddJob = Callable[..., Awaitable[list[ItemCommand]]]


@dataclass
class Subject:
    queue: GuidQueueStore
    add: AddJob


@asynccontextmanager
async def memory() -> AsyncIterator[Subject]:
    fake = InMemoryGuidQueue()

    async def add(guid: str, n: int, priority: int = 3, not_before_in_s: float | None = None,
                  expire_in_s: float | None = None) -> list[ItemCommand]:
        job, now = str(uuid.uuid4()), datetime.now(UTC)
        cmds = [ItemCommand(item_id=str(uuid.uuid4()), job_id=job, shard_id=1, guid=guid, to_id=f"r{k}",
                            content="hi", idem_key=f"{job}:{k}", priority=priority, kind="campaign",
                            not_before=None if not_before_in_s is None else now + timedelta(seconds=not_before_in_s),
                            expire_at=None if expire_in_s is None else now + timedelta(seconds=expire_in_s))
                for k in range(1, n + 1)]
        fake.add(*cmds)
        return cmds

    yield Subject(fake, add)


@asynccontextmanager
async def postgres(url: str) -> AsyncIterator[Subject]:
    pool = await open_pool(url, min_size=1, max_size=2)

    async def add(guid: str, n: int, priority: int = 3, not_before_in_s: float | None = None,
                  expire_in_s: float | None = None) -> list[ItemCommand]:
        job = add_job(url, guid, n, priority=priority, not_before_in_s=not_before_in_s, expire_in_s=expire_in_s)
        with psycopg.connect(url, row_factory=dict_row) as conn:
            rows = conn.execute("SELECT item_id::text, job_id::text, shard_id, guid, to_id, content, idem_key, priority,"
                                " kind, expire_at, not_before, created_at FROM items WHERE job_id = %s"
                                " ORDER BY created_at", (job,)).fetchall()
        return [ItemCommand.model_validate(row) for row in rows]

    try:
        yield Subject(PostgresGuidQueue(pool), add)
    finally:
        await pool.close()


Scenario = Callable[[Subject], Awaitable[None]]


@pytest.fixture(params=["memory", "postgres"])
def run(request: pytest.FixtureRequest) -> Callable[[Scenario], None]:
    """Run a scenario against one implementation of the port."""
    return contract(request, memory, postgres)


def ids(cmds: list[ItemCommand]) -> list[str]:
    return [c.item_id for c in cmds]


def test_next_ready_gives_the_guids_ready_items_urgent_first_and_when_the_next_is_due(
        run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        batch = await s.add("g1", 3)
        (reply,) = await s.add("g1", 1, priority=1)
        await s.add("g1", 1, not_before_in_s=90)  # scheduled: not ready, but says when it is due
        await s.add("g2", 2)  # another guid's
        ready = await s.queue.next_ready("g1", [], 10)
        assert ids(ready.commands) == [reply.item_id, *ids(batch)]
        assert ready.due_in_s is not None and 80 < ready.due_in_s <= 90
        assert ids((await s.queue.next_ready("g1", [reply.item_id], 2)).commands) == ids(batch[:2])
        assert (await s.queue.next_ready("nobody", [], 10)).commands == []

    run(scenario)


def test_the_sweep_finds_each_guid_with_work_due_within_the_horizon_once(run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        await s.add("ready", 3)
        await s.add("soon", 1, not_before_in_s=5)
        await s.add("later", 1, not_before_in_s=3600)
        found = await s.queue.waiting_guids(horizon_s=30, grace_s=20)
        assert sorted(w.guid for w in found) == ["ready", "soon"]

    run(scenario)


def test_shedding_expires_the_batch_items_that_cannot_make_their_deadline_and_only_those(
        run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        await s.add("g1", 3, expire_in_s=5)  # at one send per 10 s, none can go out in time
        keep = await s.add("g1", 2, expire_in_s=3600)
        (reply,) = await s.add("g1", 1, priority=1, expire_in_s=5)  # online: never shed
        assert await s.queue.shed("g1", Drain(10.0)) == 3
        assert sorted(ids((await s.queue.next_ready("g1", [], 10)).commands)) == sorted([reply.item_id, *ids(keep)])
        assert await s.queue.shed("g1", Drain(10.0)) == 0

    run(scenario)


def test_fail_unsent_fails_a_pending_item_once(run: Callable[[Scenario], None]) -> None:
    async def scenario(s: Subject) -> None:
        first, second = await s.add("g1", 2)
        assert await s.queue.fail_unsent(first, "bad_params", "cannot be sent") is True
        assert ids((await s.queue.next_ready("g1", [], 10)).commands) == [second.item_id]
        assert await s.queue.fail_unsent(first, "bad_params", "again") is False

    run(scenario)
