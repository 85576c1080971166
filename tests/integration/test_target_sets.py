"""Requery target sets on real Postgres, Kafka and the fake gateway's audience endpoint:
paging, the cursor per page, a changing audience, crash and resume, fetch failures, per-page
admission, and sub-shards of long guids."""

from __future__ import annotations

import asyncio
import json
import uuid
import zlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest

from pacer_common import tracing
from pacer_common.db.pool import open_pool
from pacer_common.db.sql import sql_file
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.ids import Guid
from pacer_common.kafka import make_producer
from pacer_planner.adapters.http import HttpTargetSource
from pacer_planner.adapters.kafka import KafkaCommandBus
from pacer_planner.adapters.postgres import PostgresJobStore
from pacer_planner.adapters.postgres_targets import PostgresTargetStore
from pacer_planner.core import Handled, PagingConfig, PagingSupervisor, Planner, TargetPager
from pacer_planner.domain.targets import parse_page, plan_page
from pacer_planner.ports import CommandBus, PageStored
from tests.integration import audiences
from tests.integration.audiences import Audience, requery, targets
from tests.integration.helpers import eventually, one, read_topic, wait_for, waiting_for_locks
from tests.integration.helpers import tuples as rows

pytestmark = pytest.mark.timeout(120)
gateway, topics, audience = audiences.gateway, audiences.topics, audiences.audience  # shared fixtures


# -- fixtures and helpers --------------------------------------------------------------------------

def snapshot(rid: str, items: list[dict[str, Any]]) -> bytes:
    return json.dumps({"request_id": rid, "kind": "campaign", "created_by": "t", "message": {"content": "hi {n}"},
                       "targets": {"mode": "snapshot", "items": items}}).encode()




def pages(url: str, job: str) -> list[tuple[Any, ...]]:
    return rows(url, "SELECT page_no, cursor_in, cursor_out, fetched, added, duplicates, invalid, first_error,"
                     " dispatched_at IS NOT NULL FROM job_target_pages WHERE job_id = %s ORDER BY page_no", job)


def shards_consistent(url: str, job: str) -> None:
    """Totals add up everywhere, and the projection's pending count is each shard's total."""
    total = one(url, "SELECT total FROM jobs WHERE job_id = %s", job)
    assert one(url, "SELECT count(*) FROM items WHERE job_id = %s", job) == total
    assert one(url, "SELECT coalesce(sum(total), 0) FROM shards WHERE job_id = %s", job) == total
    assert rows(url, "SELECT s.shard_id, s.total FROM shards s WHERE s.job_id = %s ORDER BY 1", job) == rows(
        url, "SELECT s.shard_id, c.n::int FROM shards s JOIN shard_status_counts c ON c.shard_id = s.shard_id"
             " AND c.status = 'pending' WHERE s.job_id = %s ORDER BY 1", job)
    assert rows(url, "SELECT s.shard_id, s.total FROM shards s WHERE s.job_id = %s ORDER BY 1", job) == rows(
        url, "SELECT shard_id, count(*)::int FROM items WHERE job_id = %s GROUP BY 1 ORDER BY 1", job)


class SimulatedCrash(Exception):
    pass


class CrashingBus:
    """The real bus, until the process 'dies' just before flushing the n+1-th dispatch."""

    def __init__(self, inner: CommandBus, ok: int) -> None:
        self.inner, self.ok = inner, ok

    def dispatch(self, commands: Sequence[ItemCommand]) -> int:
        if self.ok <= 0:
            raise SimulatedCrash("planner killed after the page's commit, before its commands were flushed")
        self.ok -= 1
        return self.inner.dispatch(commands)

    def dead_letter(self, key: bytes | None, value: bytes, reason: str, tenant: str | None = None) -> None:
        self.inner.dead_letter(key, value, reason, tenant)


@dataclass
class Instance:
    planner: Planner
    pager: TargetPager
    store: PostgresTargetStore
    supervisor: PagingSupervisor


@asynccontextmanager
async def instance(url: str, kafka_config: dict[str, str], topics: dict[str, str], owner: str = "p1", *,
                   crash_after: int | None = None, limit: int = 100_000,
                   transport: httpx.AsyncBaseTransport | None = None, **cfg: Any) -> AsyncIterator[Instance]:
    """One planner: its own pool, producer, HTTP client and paging lease owner name (the client
    fetches through ``transport`` when one is given: an audience no fake serves)."""
    pool = await open_pool(url, min_size=1, max_size=4)
    http = httpx.AsyncClient(timeout=5.0, transport=transport)
    bus: CommandBus = KafkaCommandBus(make_producer(kafka_config), lambda lane: topics[lane], topics["dlq"])
    if crash_after is not None:
        bus = CrashingBus(bus, crash_after)
    max_shard_items = cfg.pop("max_shard_items", 50_000)
    store = PostgresTargetStore(pool)
    pager = TargetPager(store, HttpTargetSource(http), bus, PagingConfig(
        owner=owner, backoff_initial_s=0.01, backoff_max_s=0.05, max_backlog_per_guid=limit,
        max_shard_items=max_shard_items, **cfg))
    try:
        yield Instance(Planner(PostgresJobStore(pool), bus, limit, max_shard_items=max_shard_items), pager, store,
                       PagingSupervisor(pager, store, max_jobs=4, sweep_s=0.1))
    finally:
        await http.aclose()
        await pool.close()


async def until(check: Any, what: str, timeout_s: float = 20.0) -> Any:
    """helpers.wait_for, off the event loop, so background pagers keep running meanwhile."""
    return await asyncio.to_thread(wait_for, check, timeout_s, what)


# -- paging ---------------------------------------------------------------------------------------

def test_requery_pages_through_the_audience_storing_the_cursor_per_page(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    audience.put(targets(10))

    async def go() -> tuple[Handled, str, str, Handled, str]:
        async with instance(database_url, kafka_config, topics, "planner-1") as p:
            h = await p.planner.handle(None, requery("rq-1", audience.url, 4))
            assert h.job_id is not None
            first = await p.pager.run(h.job_id, max_pages=1)  # then this planner stops
        assert one(database_url, "SELECT target_cursor, target_pages, target_owner FROM jobs WHERE job_id = %s",
                   h.job_id) == ("off:4", 1, None)
        async with instance(database_url, kafka_config, topics, "planner-2") as p:
            rest = await p.pager.run(h.job_id)  # another planner goes on from the stored cursor
            again = await p.planner.handle(None, requery("rq-1", audience.url, 4))
            return h, first, rest, again, await p.pager.run(h.job_id)

    h, first, rest, again, rerun = asyncio.run(go())
    job = h.job_id
    assert job is not None
    assert (h.outcome, h.paging, first, rest) == ("paging", True, "stopped", "complete")
    assert (again.outcome, rerun) == ("duplicate", "not_claimed")  # one job; nothing left to page
    assert pages(database_url, job) == [
        (1, None, "off:4", 4, 4, 0, 0, None, True),
        (2, "off:4", "off:8", 4, 4, 0, 0, None, True),
        (3, "off:8", None, 2, 2, 0, 0, None, True),
    ]
    assert one(database_url, "SELECT target_mode, total, target_pages, target_fetched, target_cursor,"
                             " target_complete_at IS NOT NULL, dispatched_at IS NOT NULL, status, target_owner"
                             " FROM jobs WHERE job_id = %s", job) == (
        "requery", 10, 3, 10, None, True, True, "running", None)
    assert rows(database_url, "SELECT to_id, content, target_page FROM items WHERE job_id = %s ORDER BY"
                              " target_page, to_id", job) == sorted(
        [(f"r{i}", f"hi {i}", 1 + i // 4) for i in range(10)], key=lambda r: (r[2], r[0]))
    assert rows(database_url, "SELECT guid, sub, subs, total FROM shards WHERE job_id = %s ORDER BY guid", job) == [
        ("g0", 0, 1, 4), ("g1", 0, 1, 3), ("g2", 0, 1, 3)]
    shards_consistent(database_url, job)
    assert [(r["cursor"], r["limit"]) for r in audience.requests()] == [(None, 4), ("off:4", 4), ("off:8", 4)]
    commands = read_topic(kafka_config, topics["batch"], expect=10)
    assert sorted(c["value"]["item_id"] for c in commands) == sorted(
        str(r[0]) for r in rows(database_url, "SELECT item_id FROM items WHERE job_id = %s", job))
    by_item = dict(rows(database_url, "SELECT item_id::text, shard_id FROM items WHERE job_id = %s", job))
    assert all(c["value"]["shard_id"] == by_item[c["value"]["item_id"]] for c in commands)


def test_an_audience_changing_while_paged_is_recorded_page_by_page(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    # After the first page, two targets appear ahead of the cursor: the next page repeats r2
    # and r3 (duplicates, skipped), and two bad targets show up at the end (invalid, skipped).
    first = targets(8)
    changed = targets(2, start=100) + first + [{"guid": "g0"}, {"guid": "g0", "to_id": "no-vars"}]
    audience.put(first, changes=[{"after_pages": 1, "targets": changed}])

    async def go() -> str:
        async with instance(database_url, kafka_config, topics) as p:
            h = await p.planner.handle(None, requery("rq-2", audience.url, 4))
            assert h.job_id is not None and await p.pager.run(h.job_id) == "complete"
            return h.job_id

    job = asyncio.run(go())
    assert pages(database_url, job) == [
        (1, None, "off:4", 4, 4, 0, 0, None, True),
        (2, "off:4", "off:8", 4, 2, 2, 0, None, True),
        (3, "off:8", None, 4, 2, 0, 2, "items[2].to_id: Field required", True),
    ]
    assert one(database_url, "SELECT total, target_fetched, target_duplicates, target_invalid FROM jobs"
                             " WHERE job_id = %s", job) == (8, 12, 2, 2)
    assert sorted(r[0] for r in rows(database_url, "SELECT to_id FROM items WHERE job_id = %s", job)) == sorted(
        f"r{i}" for i in range(8))
    shards_consistent(database_url, job)


def test_a_crash_mid_paging_resumes_from_the_stored_cursor_without_duplicates(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    audience.put(targets(20))

    async def go() -> str:
        async with instance(database_url, kafka_config, topics, "planner-a", crash_after=2, lease_ttl_s=1.0) as a:
            h = await a.planner.handle(None, requery("rq-3", audience.url, 3))
            assert h.job_id is not None
            job = h.job_id
            with pytest.raises(SimulatedCrash):
                await a.pager.run(job)  # pages 1 and 2 dispatched; page 3 stored, not flushed
            stale = await a.store.claim(job, "planner-a", 1.0)
        assert stale is not None and stale.pages == 3 and stale.cursor == "off:9"
        assert [p[0] for p in pages(database_url, job)] == [1, 2, 3]
        assert [p[-1] for p in pages(database_url, job)] == [True, True, False]
        # A requery job is never completed while its set is open, whoever tries.
        rows(database_url, "UPDATE jobs SET status = 'completed', finished_at = now() WHERE job_id = %s"
                           " RETURNING status", job)
        assert one(database_url, "SELECT status, finished_at FROM jobs WHERE job_id = %s", job) == ("running", None)

        async with instance(database_url, kafka_config, topics, "planner-b") as b:
            stop = asyncio.Event()
            sweeper = asyncio.create_task(b.supervisor.run(stop))  # takes over once a's lease runs out
            await until(lambda: one(database_url, "SELECT dispatched_at IS NOT NULL FROM jobs WHERE job_id = %s",
                                    job), "planner b to finish the job")
            stop.set()
            await sweeper
            # Planner a, back from the dead with the page it had fetched, cannot store it.
            late = parse_page({"items": targets(3, start=9), "next_cursor": "off:12"}, "off:9")
            page = plan_page(stale.request, late, {}, 50_000, job_created_at=stale.created_at)
            assert await b.store.store_page(stale, "planner-a", late, page, datetime.now(UTC), 1.0) is None
        return job

    job = asyncio.run(go())
    assert [r["cursor"] for r in audience.requests()] == [None, "off:3", "off:6", "off:9", "off:12", "off:15", "off:18"]
    assert [p[:5] for p in pages(database_url, job)] == [
        (n, None if n == 1 else f"off:{3 * (n - 1)}", None if n == 7 else f"off:{3 * n}", 3 if n < 7 else 2,
         3 if n < 7 else 2) for n in range(1, 8)]
    assert all(p[-1] for p in pages(database_url, job))
    assert one(database_url, "SELECT total, target_pages, target_owner FROM jobs WHERE job_id = %s", job) == (
        20, 7, None)
    assert one(database_url, "SELECT count(DISTINCT (guid, to_id)) FROM items WHERE job_id = %s", job) == 20
    shards_consistent(database_url, job)
    commands = read_topic(kafka_config, topics["batch"], expect=20)
    assert sorted(c["value"]["item_id"] for c in commands) == sorted(
        r[0] for r in rows(database_url, "SELECT item_id::text FROM items WHERE job_id = %s", job))


def test_fetch_failures_are_retried_then_pause_the_job_with_the_reason(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience,
        gateway: str) -> None:
    audience.put(targets(5))
    flaky = Audience(gateway, f"{audience.name}-flaky")
    flaky.put(targets(5))

    async def go() -> tuple[str, str]:
        async with instance(database_url, kafka_config, topics, page_attempts=3) as p:
            flaky.fail(2, mode="bad_json")
            h1 = await p.planner.handle(None, requery("rq-4a", flaky.url, 10))
            assert h1.job_id is not None and await p.pager.run(h1.job_id) == "complete"
            audience.fail(3)
            h2 = await p.planner.handle(None, requery("rq-4b", audience.url, 10))
            assert h2.job_id is not None and await p.pager.run(h2.job_id) == "paused"
            return h1.job_id, h2.job_id

    recovered, paused = asyncio.run(go())
    assert [r.get("fault") for r in flaky.requests()] == ["bad_json", "bad_json", None]
    assert one(database_url, "SELECT total, target_wait_reason, status FROM jobs WHERE job_id = %s",
               recovered) == (5, None, "running")

    reason = (f"target_fetch_failed: page 1 of {audience.url} (cursor None) failed 3 times, "
              "last: HTTP 500 Internal Server Error")
    assert one(database_url, "SELECT status, paused_reason, paused_by, target_wait_reason, total, target_pages"
                             " FROM jobs WHERE job_id = %s", paused) == ("paused", reason, "system:planner", reason, 0, 0)
    assert rows(database_url, "SELECT actor, action, reason FROM audit_log WHERE target_id = %s", paused) == [
        ("system:planner", "pause", reason)]
    assert len(audience.requests()) == 3

    # Resumed by an operator: with nothing open, resume would complete the job, but its target
    # set is not complete, so it runs, and paging picks up where it stopped.
    assert one(database_url, "SELECT outcome FROM pacer_job_action(%s, 'resume', 'ops:test')", paused) == "done"
    assert one(database_url, "SELECT status FROM jobs WHERE job_id = %s", paused) == "running"

    async def resume() -> str:
        async with instance(database_url, kafka_config, topics) as p:
            return await p.pager.run(paused)

    assert asyncio.run(resume()) == "complete"
    assert one(database_url, "SELECT total, target_wait_reason FROM jobs WHERE job_id = %s", paused) == (5, None)


def test_an_audience_page_nested_too_deep_to_decode_is_a_failed_fetch_that_pauses_the_job(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    # Deeper than Python's json decoder recurses: it raises RecursionError, not ValueError.
    deep = b'{"items":' + b"[" * 100_000
    served: list[httpx.Request] = []

    def audience(request: httpx.Request) -> httpx.Response:
        served.append(request)
        return httpx.Response(200, content=deep, headers={"content-type": "application/json"})

    async def go() -> tuple[str, str]:
        async with instance(database_url, kafka_config, topics, page_attempts=2,
                            transport=httpx.MockTransport(audience)) as p:
            h = await p.planner.handle(None, requery("rq-deep", "http://audience.test/deep", 10))
            assert h.job_id is not None
            return h.job_id, await p.pager.run(h.job_id)

    job, outcome = asyncio.run(go())
    assert (outcome, len(served)) == ("paused", 2)  # each attempt counted, then the job is held
    reason = ("target_fetch_failed: page 1 of http://audience.test/deep (cursor None) failed 2 times, "
              "last: response is not JSON Pacer can read: nested too deeply")
    assert one(database_url, "SELECT status, paused_reason, target_wait_reason, total FROM jobs WHERE job_id = %s",
               job) == ("paused", reason, reason, 0)


@pytest.mark.parametrize("extra", [{}, {"kind": "auto_reply", "source_msg_uid": "m-1", "priority": 5}],
                         ids=["campaign", "auto-reply-at-a-batch-priority"])
def test_a_page_waits_for_admission_while_its_guid_is_backlogged(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience,
        extra: dict[str, Any]) -> None:
    # An auto-reply asking for priority 5 goes out in the batch lane: its pages wait like a campaign's.
    audience.put(targets(3, guid="g0"))

    async def go() -> tuple[str, str]:
        async with instance(database_url, kafka_config, topics, limit=5, admission_wait_s=0.05) as p:
            backlog = await p.planner.handle(None, snapshot("snap-1", targets(5, guid="g0")))
            assert backlog.outcome == "planned" and backlog.job_id is not None
            h = await p.planner.handle(None, requery("rq-5", audience.url, 10, **extra))
            assert h.job_id is not None
            job = h.job_id
            paging = asyncio.create_task(p.pager.run(job))
            waiting = await until(lambda: one(database_url, "SELECT target_wait_reason FROM jobs WHERE job_id = %s",
                                              job), "the page to wait for admission")
            assert one(database_url, "SELECT count(*) FROM items WHERE job_id = %s", job) == 0
            # The backlog drains (here: cancelled), and the page goes in.
            rows(database_url, "SELECT * FROM pacer_job_action(%s, 'cancel', 'ops:test')", backlog.job_id)
            assert await asyncio.wait_for(paging, 20) == "complete"
            return job, waiting

    job, waiting = asyncio.run(go())
    assert waiting == ("page 1 waits: admission refused: guid 'g0' has 5 queued items and this page adds 3, "
                       "over the limit of 5 per guid")
    assert one(database_url, "SELECT total, target_wait_reason FROM jobs WHERE job_id = %s", job) == (3, None)
    assert len(audience.requests()) >= 2  # fetched again after waiting


def test_an_empty_audience_completes_the_job_at_once(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    audience.put([])

    async def go() -> str:
        async with instance(database_url, kafka_config, topics) as p:
            h = await p.planner.handle(None, requery("rq-6", audience.url, 10))
            assert h.job_id is not None and await p.pager.run(h.job_id) == "complete"
            return h.job_id

    job = asyncio.run(go())
    assert one(database_url, "SELECT status, total, target_pages, finished_at IS NOT NULL, dispatched_at IS NOT NULL"
                             " FROM jobs WHERE job_id = %s", job) == ("completed", 0, 1, True, True)


def test_a_target_with_a_nul_in_a_variable_name_is_skipped_and_counted_and_the_job_goes_on(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    # Its error named the key as it came: the page's record could not store the NUL, and the job
    # was paused on that page again at every resume.
    bad = {"guid": "g0", "to_id": "bad", "vars": {"n": "x", "a\u0000b": "x"}}
    audience.put([*targets(2), bad, *targets(2, start=2)])

    async def go() -> tuple[str, str]:
        async with instance(database_url, kafka_config, topics) as p:
            h = await p.planner.handle(None, requery("rq-nul", audience.url, 10))
            assert h.job_id is not None
            return h.job_id, await p.pager.run(h.job_id)

    job, outcome = asyncio.run(go())
    assert outcome == "complete"
    assert pages(database_url, job) == [(1, None, None, 5, 4, 0, 1, "items[2].vars.'a\\x00b'.[key]: contains a NUL"
                                         " character (\\u0000), which cannot be stored", True)]
    assert one(database_url, "SELECT status, total, paused_reason FROM jobs WHERE job_id = %s", job) == (
        "running", 4, None)
    assert len(read_topic(kafka_config, topics["batch"], expect=4)) == 4


# -- trace context ----------------------------------------------------------------------------------

def trace_of(traceparent: str | bytes | None) -> str | None:
    """The trace id of a ``traceparent`` value (None if there is none)."""
    if isinstance(traceparent, bytes):
        traceparent = traceparent.decode()
    return traceparent.split("-")[1] if traceparent else None


@dataclass
class WaitingPage:
    """A page of a job mid-paging, being stored while another transaction holds the pending
    count of the job's shard of g0 (as a reconciler segment does while it waits for the job's
    row): one item for g0, one for a guid new to the job (a new shard, which references the job)."""

    job: str
    store: asyncio.Task[PageStored | None]
    holder: psycopg.AsyncConnection[Any]


@asynccontextmanager
async def page_waiting_at_a_count(url: str, a: Instance, audience: Audience) -> AsyncIterator[WaitingPage]:
    audience.put(targets(9, guids=2))
    h = await a.planner.handle(None, requery(f"rq-{uuid.uuid4().hex[:6]}", audience.url, 3))
    assert h.job_id is not None
    job = h.job_id
    with pytest.raises(SimulatedCrash):
        await a.pager.run(job)  # page 1 dispatched; page 2 stored, not flushed
    state = await a.store.claim(job, "planner-a", 30.0)
    assert state is not None and (state.pages, state.cursor) == (2, "off:6")
    late = parse_page({"items": [{"guid": "g0", "to_id": "r100", "vars": {"n": "x"}},
                                 {"guid": "g-new", "to_id": "r101", "vars": {"n": "y"}}], "next_cursor": "off:99"},
                      state.cursor)
    plan = plan_page(state.request, late, await a.store.known_subs(job, [Guid("g0"), Guid("g-new")]), 50_000,
                     job_created_at=state.created_at)
    g0 = one(url, "SELECT shard_id FROM shards WHERE job_id = %s AND guid = 'g0'", job)
    holder = await psycopg.AsyncConnection.connect(url)
    try:
        await holder.execute("SELECT 1 FROM shard_status_counts WHERE shard_id = %s AND status = 'pending' FOR UPDATE",
                             (g0,))
        store = asyncio.create_task(a.store.store_page(state, "planner-a", late, plan, datetime.now(UTC), 30.0))
        await eventually(lambda: waiting_for_locks(url), 20, "the page waiting for g0's count")
        assert not store.done()
        yield WaitingPage(job, store, holder)
    finally:
        await holder.close()


def test_a_page_waiting_for_a_shards_count_leaves_the_jobs_row_to_the_reconciler(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    """A reconciler segment holds its shards' counts while it waits for their job's row
    (lock_jobs.sql). A page takes them in the same order: its items, the counts, the shards and
    only then the job. While the page waits for a count the segment takes the job's row at once,
    the page's new shard (its key share on the job) notwithstanding; let through, the page is
    stored whole."""
    url = database_url

    async def go() -> str:
        async with instance(url, kafka_config, topics, "planner-a", crash_after=1) as a, \
                page_waiting_at_a_count(url, a, audience) as w:
            async with await psycopg.AsyncConnection.connect(url) as segment:
                await segment.execute("SET lock_timeout = '5s'")
                locked = await (await segment.execute(sql_file("pacer_reconciler.adapters.sql", "lock_jobs"),
                                                      {"jobs": [w.job]})).fetchall()
                assert len(locked) == 1
                await segment.rollback()
            await w.holder.rollback()
            stored = await w.store
            assert stored is not None and len(stored.added) == 2
            return w.job

    job = asyncio.run(go())
    assert [p[:5] for p in pages(url, job)][2] == (3, "off:6", "off:99", 2, 2)
    assert one(url, "SELECT total, target_pages FROM jobs WHERE job_id = %s", job) == (8, 3)
    shards_consistent(url, job)


def test_a_page_whose_lease_was_taken_while_it_waited_is_rolled_back_whole(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    """The page's guard is read before it writes anything and checked again under the job's row,
    the last lock it takes: a lease taken over in between (the job's row is not held meanwhile)
    refuses the page, and none of its items, shards or counts stays."""
    url = database_url

    async def go() -> str:
        async with instance(url, kafka_config, topics, "planner-a", crash_after=1) as a, \
                page_waiting_at_a_count(url, a, audience) as w:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as other:
                await other.execute("SET lock_timeout = '5s'")
                await other.execute("UPDATE jobs SET target_owner = 'planner-b' WHERE job_id = %s", (w.job,))
            await w.holder.rollback()
            assert await w.store is None
            return w.job

    job = asyncio.run(go())
    assert [p[0] for p in pages(url, job)] == [1, 2]
    assert one(url, "SELECT total, target_pages, target_owner FROM jobs WHERE job_id = %s", job) == (
        6, 2, "planner-b")
    assert one(url, "SELECT count(*) FROM shards WHERE job_id = %s AND guid = 'g-new'", job) == 0
    shards_consistent(url, job)


def test_a_requery_jobs_pages_are_fetched_stored_and_dispatched_in_the_requests_trace(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    # Pages are fetched after the request's own span has ended, by whichever planner holds the
    # job, one of them after a crash: each takes the trace from the job.
    audience.put(targets(5))
    trace = uuid.uuid4().hex
    request = tracing.parent(f"00-{trace}-{uuid.uuid4().hex[:16]}-01")

    async def go() -> str:
        async with instance(database_url, kafka_config, topics, "planner-a", crash_after=1) as a:
            with tracing.span("plan job request", request, "consumer"):
                h = await a.planner.handle(None, requery("rq-trace", audience.url, 2))
            assert h.job_id is not None
            with pytest.raises(SimulatedCrash):
                await a.pager.run(h.job_id)  # page 1 dispatched; page 2 stored, not flushed
        async with instance(database_url, kafka_config, topics, "planner-a") as b:
            assert await b.pager.run(h.job_id) == "complete"  # page 2 re-dispatched from its rows
        return h.job_id

    job = asyncio.run(go())
    assert trace_of(one(database_url, "SELECT traceparent FROM jobs WHERE job_id = %s", job)) == trace
    assert [trace_of(r["traceparent"]) for r in audience.requests()] == [trace] * 3
    stored = rows(database_url, "SELECT target_page, traceparent FROM items WHERE job_id = %s ORDER BY 1", job)
    assert [(page, trace_of(t)) for page, t in stored] == [(1, trace), (1, trace), (2, trace), (2, trace),
                                                           (3, trace)]
    commands = read_topic(kafka_config, topics["batch"], expect=5)
    assert len(commands) == 5
    assert [trace_of(c["headers"].get("traceparent")) for c in commands] == [trace] * 5
    assert [trace_of(c["value"]["traceparent"]) for c in commands] == [trace] * 5


# -- sub-shards -------------------------------------------------------------------------------------

def test_a_requery_guid_keeps_the_sub_count_fixed_on_the_page_it_first_appeared(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    # page 1: big r0..r6 (7 > max 3: 3 subs) and small s0 (1 sub); pages 2 and 3 add to both.
    big = targets(13, guid="big")
    small = [{"guid": "small", "to_id": f"s{i}", "vars": {"n": "x"}} for i in range(4)]
    audience.put(big[:7] + small[:1] + big[7:] + small[1:])

    async def go() -> str:
        async with instance(database_url, kafka_config, topics, max_shard_items=3) as p:
            h = await p.planner.handle(None, requery("rq-7", audience.url, 8))
            assert h.job_id is not None and await p.pager.run(h.job_id) == "complete"
            return h.job_id

    job = asyncio.run(go())
    assert one(database_url, "SELECT array_agg(DISTINCT subs) FROM shards WHERE job_id = %s AND guid = 'big'",
               job) == [3]
    assert rows(database_url, "SELECT sub, subs, total FROM shards WHERE job_id = %s AND guid = 'small'", job) == [
        (0, 1, 4)]  # one shard, grown past the max: its count was fixed when it had one target
    for to_id, sub in rows(database_url, "SELECT i.to_id, s.sub FROM items i JOIN shards s USING (shard_id)"
                                         " WHERE i.job_id = %s AND i.guid = 'big'", job):
        assert sub == zlib.crc32(to_id.encode()) % 3
    assert one(database_url, "SELECT total FROM jobs WHERE job_id = %s", job) == 17
    shards_consistent(database_url, job)


def test_a_requery_page_naming_another_tenants_guid_holds_the_job_with_the_reason(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme')")
    audience.put(targets(4, guids=2))  # guids g0, g1

    async def go() -> tuple[str, str]:
        async with instance(database_url, kafka_config, topics) as p:
            mine = await p.planner.handle(None, snapshot("tq-default", targets(1, guids=1)))  # g0 is default's
            assert mine.outcome == "planned"
            h = await p.planner.handle(None, requery("tq-acme", audience.url, 10, tenant="acme"))
            assert h.job_id is not None
            return h.job_id, await p.pager.run(h.job_id)

    job, outcome = asyncio.run(go())
    assert outcome == "paused"
    status, reason, total = one(database_url, "SELECT status, paused_reason, total FROM jobs WHERE job_id = %s", job)
    assert (status, total) == ("paused", 0)
    assert "guid 'g0' belongs to another tenant than 'acme'" in reason
    assert rows(database_url, "SELECT guid, tenant FROM tenant_guids ORDER BY guid") == [("g0", "default")]


def test_a_requery_text_of_static_variables_is_stored_once_unless_a_target_overrides_one(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str], audience: Audience) -> None:
    audience.put([{"guid": "g0", "to_id": "r0"}, {"guid": "g0", "to_id": "r1", "vars": {"brand": "Other"}},
                  {"guid": "g1", "to_id": "r2"}])
    body = json.dumps({
        "request_id": "rq-static", "kind": "campaign", "created_by": "t", "message": {"content": "hi from {brand}"},
        "targets": {"mode": "requery", "url": audience.url, "page_size": 2, "vars": {"brand": "Pacer"}},
    }).encode()

    async def go() -> tuple[str, list[str]]:
        async with instance(database_url, kafka_config, topics) as p:
            h = await p.planner.handle(None, body)
            assert h.job_id is not None
            assert await p.pager.run(h.job_id) == "complete"
            return h.job_id, [c.content for c in await p.store.page_commands(h.job_id, [1, 2])]

    job, republished = asyncio.run(go())
    assert one(database_url, "SELECT item_content FROM jobs WHERE job_id = %s", job) == "hi from Pacer"
    assert rows(database_url, "SELECT to_id, content FROM items WHERE job_id = %s ORDER BY to_id", job) == [
        ("r0", None), ("r1", "hi from Other"), ("r2", None)]
    assert sorted(republished) == ["hi from Other", "hi from Pacer", "hi from Pacer"]
    commands = read_topic(kafka_config, topics["batch"], expect=3)
    assert sorted(c["value"]["content"] for c in commands) == ["hi from Other", "hi from Pacer", "hi from Pacer"]
