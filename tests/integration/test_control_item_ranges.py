"""A job's items read by item id stay within the job's range of ids (adapters/sql/item_span.sql)
on a real Postgres: a page of the item list, and the items a retry or a cancel by filter picks,
read the job's own rows, not those of the jobs created before and after it; every item of
the job is in that range, including one added after the range was read and kept, and one
whose id carries another time than its job's; a test send's item id carries its job's time."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pacer_common.db.pool import open_pool
from pacer_common.db.sql import loader
from pacer_control.adapters.postgres import PostgresControl
from pacer_control.core import Control
from pacer_control.domain.filters import FAILED, ItemFilter
from tests.integration.control_support import control_api, move, rows
from tests.integration.helpers import seed_job, sql

SQL = loader("pacer_control.adapters.sql")  # the statements as the adapter runs them
BIG = 20_000  # items of each of the jobs created before and after the one read
MIDDLE = 3_000  # items of the job read
PAGE = 50


def bulk_job(url: str, n: int, created_at: datetime, guids: int = 4) -> str:
    """A job of ``n`` pending items, ids stamped with ``created_at`` as the planner's are,
    written by one statement a guid."""
    job = str(uuid.uuid4())
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version,"
                     " target_mode, total, request, created_at)"
                     " VALUES (%s, %s, 'campaign', 3, 't', '{}', 1, 'snapshot', %s, '{}', %s)",
                     (job, f"req-{job}", n, created_at))
        for g in range(guids):
            (shard,) = conn.execute("INSERT INTO shards (job_id, guid, total) VALUES (%s, %s, %s) RETURNING shard_id",
                                    (job, f"bulk-{g}", n // guids)).fetchone()
            conn.execute("INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind,"
                         " status) SELECT pacer_item_id(%s), %s, %s, %s, 'room-' || k, 'hi', %s || k, 3, 'campaign',"
                         " 'pending' FROM generate_series(1, %s) k",
                         (created_at, job, shard, f"bulk-{g}", f"k-{job}-{g}-", n // guids))
    return job


def scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan] if "Relation Name" in plan else []
    for child in plan.get("Plans", []):
        out += scans(child)
    return out


def read_of_items(url: str, name: str, params: dict[str, Any]) -> tuple[int, int, int]:
    """EXPLAIN (ANALYZE, BUFFERS) of the adapter's statement ``name`` as it runs it (planned
    for these values): the rows it returned, and the rows and buffers its scans of ``items``
    read (rows kept, and thrown away by a filter or a recheck, over every loop)."""
    with psycopg.connect(url) as conn:  # a transaction rolled back: select_for_cancel's, as it runs
        (doc,) = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + SQL(name), params,
                              prepare=False).fetchone()
        conn.rollback()
    top = doc[0]["Plan"]
    mine = [s for s in scans(top) if s["Relation Name"].startswith("items")]
    read = sum((s["Actual Rows"] + s.get("Rows Removed by Filter", 0) + s.get("Rows Removed by Index Recheck", 0))
               * s["Actual Loops"] for s in mine)
    buffers = sum(s["Shared Hit Blocks"] + s["Shared Read Blocks"] for s in mine)
    return int(top["Actual Rows"]), int(read), int(buffers)


@pytest.fixture
def three_jobs(database_url: str) -> tuple[str, str, list[str], str, str]:
    """A job of ``MIDDLE`` items (20 failed) between two of ``BIG`` items each, created before
    (half of them failed, half pending) and after it (pending), all in the same partition;
    returns (url, the middle job, its item ids by id, the job before, the job after)."""
    url = database_url
    now = datetime.now(UTC)
    before = bulk_job(url, BIG, now - timedelta(minutes=20))
    job = bulk_job(url, MIDDLE, now - timedelta(minutes=10))
    after = bulk_job(url, BIG, now - timedelta(minutes=5))
    items = [r["item_id"] for r in rows(url, "SELECT item_id::text FROM items WHERE job_id = %s ORDER BY item_id", job)]
    move(url, items[100:120], "failed", "gateway_error")
    sql(url, "UPDATE items SET status = 'failed', last_error_class = 'gateway_error'"
             " WHERE job_id = %s AND guid IN ('bulk-0', 'bulk-1')", before)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE items")
    return url, job, items, before, after


def test_a_page_of_a_jobs_items_reads_its_own_rows_not_those_of_the_jobs_around_it(
        three_jobs: tuple[str, str, list[str], str, str]) -> None:
    url, job, items, _, _ = three_jobs

    async def go() -> tuple[list[str], Any]:
        pool = await open_pool(url, min_size=1, max_size=2, name="test-ranges")
        try:
            control = Control(PostgresControl(pool))
            seen: list[str] = []
            after = None
            while True:  # every item once, by id, a page at a time
                page = await control.items(job, ItemFilter(limit=PAGE, after=after))
                seen += [r["item_id"] for r in page]
                if len(page) < PAGE:
                    break
                after = page[-1]["item_id"]
            return seen, await PostgresControl(pool).item_span(job)
        finally:
            await pool.close()

    seen, span = asyncio.run(go())
    assert seen == items
    base = {"job": job, "first": span.first, "last": span.last, "statuses": None, "guid": None, "error_class": None,
            "with_error": False, "limit": PAGE}
    cases = {
        "first page": ({**base, "after": None}, PAGE),
        "a page in the middle": ({**base, "after": items[MIDDLE // 2]}, PAGE),
        "the last page": ({**base, "after": items[-10]}, 9),
        "pending, first page": ({**base, "statuses": ["pending"], "after": None}, PAGE),
        # what the console's job page polls every second
        "failed, with an error": ({**base, "statuses": [s.value for s in FAILED], "with_error": True, "limit": 200,
                                   "after": None}, 20),
    }
    for what, (params, expected) in cases.items():
        got, read, buffers = read_of_items(url, "items", params)
        assert got == expected, what
        # Never the 20,000 items of the job before or after it: at most its own rows (the
        # page's through the primary key, or the job's through items_job_status and sorted:
        # the planner's choice, by the job's share of its range, as for a report's page).
        assert read <= MIDDLE + 10 and buffers <= MIDDLE // 2, (what, read, buffers)
        if what == "the last page":  # which walked every item of the job after it
            assert read <= PAGE + 10 and buffers <= PAGE + 20, (what, read, buffers)

    # A retry or cancel by filter picks from the job's own rows too, whatever it asks for.
    picks: dict[str, tuple[str, dict[str, Any], tuple[tuple[str | None, int], ...]]] = {  # a first part, a later one
        "retry by filter": ("select_for_retry", {"status": "failed", "error_class": None, "guid": None},
                            ((None, 20), (items[110], 9))),
        "cancel by filter": ("select_for_cancel", {"statuses": ["pending", "waiting_retry"], "guid": None},
                             ((None, MIDDLE - 20), (items[-5], 4))),
    }
    for what, (name, extra, parts) in picks.items():
        for after, n in parts:
            params = {"job": job, "first": span.first, "last": span.last, "limit": 10_001, "after": after, **extra}
            got, read, buffers = read_of_items(url, name, params)
            assert got == n, what
            assert read <= MIDDLE + 10 and buffers <= MIDDLE // 2, (what, after, read, buffers)


def test_the_last_part_of_a_retry_or_cancel_by_filter_reads_on_to_the_end_of_its_job_only(
        three_jobs: tuple[str, str, list[str], str, str]) -> None:
    """The last part of a retry or a cancel by filter of the job before the others (``BIG``
    items, half failed, half pending): after an item near the end of its ids, it reads the few
    items of the job after that one, not the 23,000 of the jobs after it (nor all its own)."""
    url, _, _, before, _ = three_jobs

    async def span() -> Any:
        pool = await open_pool(url, min_size=1, max_size=2, name="test-ranges")
        try:
            return await PostgresControl(pool).item_span(before)
        finally:
            await pool.close()

    bounds = asyncio.run(span())

    def sixth_last(status: str) -> str:
        return str(rows(url, "SELECT item_id::text FROM items WHERE job_id = %s AND status = %s::item_status"
                             " ORDER BY item_id DESC LIMIT 1 OFFSET 5", before, status)[0]["item_id"])

    cases: dict[str, tuple[str, str, dict[str, Any]]] = {
        "retry by filter": ("select_for_retry", sixth_last("failed"),
                            {"status": "failed", "error_class": None, "guid": None}),
        "cancel by filter": ("select_for_cancel", sixth_last("pending"),
                             {"statuses": ["pending", "waiting_retry"], "guid": None}),
    }
    for what, (name, after, extra) in cases.items():
        params = {"job": before, "first": bounds.first, "last": bounds.last, "limit": 10_001, "after": after, **extra}
        got, read, _ = read_of_items(url, name, params)
        assert got == 5, what
        assert read <= 50, (what, read)  # the last five, and the other status's items among them


def test_every_item_of_a_job_is_in_its_range_however_its_id_was_made(database_url: str) -> None:
    """An item added once the job's range is kept (a requery page, a retry's compensation: its
    id anywhere in the millisecond of the job's creation) and an item whose id carries another
    time than its job's (a test send's, made before its id was stamped with its job's time)
    are each listed, in the report and picked by a cancel by filter."""
    url = database_url
    created = datetime.now(UTC) - timedelta(minutes=5)
    ms = f"{int(created.timestamp() * 1000):012x}"
    stamp = f"{ms[:8]}-{ms[8:]}"
    job, _, items = seed_job(url, {"g1": 2}, created_at=created)
    shard = rows(url, "SELECT shard_id FROM shards WHERE job_id = %s", job)[0]["shard_id"]
    # Two items in the middle of the millisecond: the job's items as first read.
    middle = [f"{stamp}-7800-8000-00000000000{k}" for k in (1, 2)]
    sql(url, "UPDATE items SET item_id = (ARRAY[%s, %s]::uuid[])[CASE WHEN item_id = %s THEN 1 ELSE 2 END]"
             " WHERE job_id = %s", middle[0], middle[1], items[0], job)

    def add(item_id: str) -> None:
        sql(url, "INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind, status)"
                 " VALUES (%s, %s, %s, 'g1', %s, 'hi', %s, 3, 'campaign', 'pending')",
                 item_id, job, shard, f"room-{item_id}", f"k-{item_id}")

    async def go() -> None:
        async with control_api(url) as api:
            async def listed() -> list[str]:
                r = await api.get(f"/jobs/{job}/items?limit=100", "operator")
                assert r.status_code == 200, r.text
                return [i["item_id"] for i in r.json()["items"]]

            assert await listed() == middle  # the range is read and kept now
            # Added since, at both ends of the millisecond: inside the range kept, though
            # outside the ids first read.
            late = [f"{stamp}-7000-8000-000000000001", f"{stamp}-7fff-bfff-fffffffffffe"]
            for item_id in late:
                add(item_id)
            assert await listed() == [late[0], *middle, late[1]]
            report = (await api.get(f"/jobs/{job}/report.csv", "operator")).text
            assert [line.split(",")[0] for line in report.splitlines()[1:]] == [late[0], *middle, late[1]]

        # An id stamped 3 ms before its job's creation (a test send's, as the Control API's
        # clock stamped them), there before the range is first read (a new app: nothing kept).
        early = f"{int(created.timestamp() * 1000) - 3:012x}"
        odd = f"{early[:8]}-{early[8:]}-7abc-8000-000000000001"
        add(odd)
        async with control_api(url, token_prefix="again-") as api:
            r = await api.get(f"/jobs/{job}/items?limit=100", "operator")
            assert [i["item_id"] for i in r.json()["items"]] == [odd, late[0], *middle, late[1]]
            r = await api.post(f"/jobs/{job}/cancel-items", "operator", json={"reason": "all of them"})
            assert r.status_code == 200 and r.json()["totals"]["cancelled"] == 5, r.text

    asyncio.run(go())


def test_a_test_sends_item_id_carries_its_jobs_creation_time(database_url: str) -> None:
    async def go() -> dict[str, Any]:
        async with control_api(database_url, sandbox_targets=["sandbox-room"]) as api:
            r = await api.post("/test-send", "tech_admin", json={"guid": "g1", "to_id": "sandbox-room",
                                                                  "content": "hello"})
            assert r.status_code == 200, r.text
            return dict(r.json())

    made = asyncio.run(go())
    (row,) = rows(database_url, "SELECT pacer_item_id_time(i.item_id) AS stamped,"
                                " date_trunc('milliseconds', j.created_at) AS created"
                                " FROM items i JOIN jobs j USING (job_id) WHERE i.item_id = %s", made["item_id"])
    assert row["stamped"] == row["created"]
