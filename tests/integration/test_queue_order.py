"""A guid's queue in Postgres: what goes next is chosen over all of its ready work (priority,
fair share across jobs by weight, age) exactly as ``domain/order.py`` states it, at any
depth; scheduled work never stands in the way of ready work; shedding expires the batch
items that cannot make their expire_at, with an event."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pacer_common.db.pool import open_pool
from pacer_sender.adapters.queue import NEXT_READY_SETTINGS, PostgresGuidQueue
from pacer_sender.domain.order import Queued, fair_order, sheds
from pacer_sender.domain.pacing import Drain, GuidPacer, Limits
from tests.integration.helpers import add_job, run, sql


def all_ready(url: str, guid: str) -> list[Queued]:
    """Every ready item of ``guid`` straight from the table (no index, no cleverness)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT item_id::text, job_id::text, priority, extract(epoch FROM COALESCE(not_before, created_at))"
            " FROM items WHERE guid = %s AND status = 'pending' AND NOT held"
            " AND COALESCE(not_before, created_at) <= now()", (guid,)).fetchall()
    return [Queued(i, j, p, float(t)) for i, j, p, t in rows]


def weights(url: str) -> dict[str, float]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT substr(guid, 5), (limits->>'weight')::float8 FROM guid_limits"
                            " WHERE guid LIKE 'job:%%' AND limits ? 'weight'").fetchall()
    return dict(rows)


def next_ids(url: str, guid: str, limit: int, exclude: list[str] | None = None) -> list[str]:
    ready = run(url, lambda pool: PostgresGuidQueue(pool).next_ready(guid, exclude or [], limit))
    return [c.item_id for c in ready.commands]


def test_at_depth_the_next_items_are_the_domain_order_over_all_ready_work(database_url: str) -> None:
    url = database_url
    big = add_job(url, "g", 20_000, age_s=3600)                       # a broadcast queued an hour ago
    late = add_job(url, "g", 300, age_s=10, weight=2.0)               # a later job on the same guid, weight 2
    ticket = add_job(url, "g", 5, priority=2, age_s=1)                # tickets: a better priority
    add_job(url, "g", 5_000, age_s=7200, not_before_in_s=3600)        # scheduled an hour ahead, queued earlier
    add_job(url, "other", 50)                                          # another guid's work
    w = weights(url)
    expected = [q.item_id for q in fair_order(all_ready(url, "g"), w.get)][:40]
    got = next_ids(url, "g", 40)
    assert got == expected
    jobs = [{q.item_id: q.job_id for q in all_ready(url, "g")}[i] for i in got]
    assert jobs[:5] == [ticket] * 5, "the better priority first, however deep the campaign"
    assert jobs[5:] == ([big, late, late] * 12)[:35], "then the jobs share: the later one, of weight 2, sends two for one"


def test_the_window_in_hand_is_left_out_and_the_order_goes_on_after_it(database_url: str) -> None:
    url = database_url
    add_job(url, "g", 100, age_s=100)
    add_job(url, "g", 100, age_s=50)
    first = next_ids(url, "g", 10)
    second = next_ids(url, "g", 10, exclude=first)
    assert not set(first) & set(second)
    rest = [q for q in all_ready(url, "g") if q.item_id not in first]
    assert second == [q.item_id for q in fair_order(rest)][:10]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 40), st.sampled_from([0, 1, 2, 3, 5]), st.integers(0, 3000),
                          st.sampled_from([None, 0.5, 1.0, 3.0]), st.booleans()), min_size=1, max_size=5),
       st.integers(1, 60))
def test_for_any_mix_of_jobs_priorities_ages_and_weights_postgres_and_the_domain_agree(
        database_url: str, jobs: list[tuple[int, int, int, float | None, bool]], limit: int) -> None:
    guid = f"g-{uuid.uuid4().hex[:8]}"
    for n, priority, age, weight, scheduled in jobs:
        add_job(database_url, guid, n, priority=priority, age_s=age, weight=weight,
                not_before_in_s=(-age / 2 if not scheduled else 600))
    expected = [q.item_id for q in fair_order(all_ready(database_url, guid), weights(database_url).get)][:limit]
    assert next_ids(database_url, guid, limit) == expected


def test_scheduled_work_never_blocks_ready_work_and_joins_the_order_once_due(database_url: str) -> None:
    url = database_url
    scheduled = add_job(url, "g", 2_000, age_s=600, not_before_in_s=3600)
    ready = add_job(url, "g", 30, age_s=1)
    got = run(url, lambda pool: PostgresGuidQueue(pool).next_ready("g", [], 50))
    assert {c.job_id for c in got.commands} == {ready} and len(got.commands) == 30
    assert got.due_in_s is not None and 3590 < got.due_in_s <= 3600
    sql(url, "UPDATE items SET not_before = now() - interval '1 second' WHERE job_id = %s", scheduled)
    got = run(url, lambda pool: PostgresGuidQueue(pool).next_ready("g", [], 10))
    assert {c.job_id for c in got.commands} == {scheduled, ready}, "due now: it takes turns with the ready job"
    assert got.due_in_s is None


# One send a second: 80 of the campaign's 200 make it. Slowed ×8 by a rate limit that wears off
# by ×0.9 a send, the first 20 sends take about 50 s more: 29 make it.
PENALIZED = GuidPacer(multiplier=8.0).drain(Limits(min_interval_s=1.0, jitter_s=0.0, online_reserve=0.0,
                                                   penalty_decay=0.9))


@pytest.mark.parametrize(("drain", "sheds_between"), [(Drain(1.0), (115, 125)), (PENALIZED, (166, 176))],
                         ids=["own pace", "slowed, wearing off"])
def test_shedding_expires_exactly_the_batch_items_that_cannot_make_their_expire_at(
        database_url: str, drain: Drain, sheds_between: tuple[int, int]) -> None:
    url = database_url
    add_job(url, "g", 3, priority=1, age_s=5, expire_in_s=2)           # online: never shed
    ahead = add_job(url, "g", 20, priority=2, age_s=5)                 # tickets, no expire_at: ahead of the campaign
    campaign = add_job(url, "g", 200, age_s=60, expire_in_s=100)
    interval = drain
    with psycopg.connect(url) as conn:
        exp: dict[str, float] = dict(conn.execute("SELECT item_id::text, extract(epoch FROM expire_at) FROM items"
                                " WHERE guid = 'g' AND expire_at IS NOT NULL").fetchall())
    batch = [q for q in fair_order(all_ready(url, "g")) if q.priority > 1]
    now = datetime.now(UTC).timestamp()
    expected = {q.item_id for p, q in enumerate(batch, 1) if sheds(p, float(exp.get(q.item_id) or 0) or None, now,
                                                                     interval)}
    shed = run(url, lambda pool: PostgresGuidQueue(pool).shed("g", interval))
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT item_id::text, job_id::text, status::text, last_error_class FROM items"
                            " WHERE guid = 'g'").fetchall()
        events = conn.execute("SELECT type, from_status::text, to_status::text, payload->>'error_class'"
                              " FROM item_events WHERE guid = 'g'").fetchall()
    gone = {i for i, _, status, cls in rows if status == "expired" and cls == "shed"}
    assert shed == len(gone) and sheds_between[0] <= shed <= sheds_between[1], shed
    assert len(gone ^ expected) <= 2, "the same items as the domain's rule (a second's drift at the edge)"
    assert all(job == campaign for i, job, _, _ in rows if i in gone), "online and items without expire_at stay"
    assert all(status == "pending" for _, job, status, _ in rows if job == ahead)
    assert set(events) == {("ItemExpired", "pending", "expired", "shed")}


def _items_rows_read(url: str, guid: str, limit: int) -> int:
    """Rows of ``items`` the refill reads (index entries fetched plus rows filtered away),
    run as the adapter runs it, from its EXPLAIN ANALYZE."""
    statement = resources.files("pacer_sender.adapters.sql").joinpath("next_ready.sql").read_text()
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        for setting in NEXT_READY_SETTINGS:
            conn.execute(setting)
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement,
                            {"guid": guid, "exclude": [], "limit": limit}).fetchone()[0]

    def read(node: dict[str, Any]) -> int:
        own = 0
        if node.get("Relation Name") == "items":
            own = int((node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"])
        return own + sum(read(child) for child in node.get("Plans", []))

    return read(plan[0]["Plan"])


def test_a_refill_reads_a_window_per_job_however_deep_and_whatever_the_statistics_say(database_url: str) -> None:
    url = database_url
    add_job(url, "other", 500)
    sql(url, "ANALYZE items")  # statistics that have never seen the jobs below: a job just loaded
    add_job(url, "g", 20_000, age_s=60)
    add_job(url, "g", 300, age_s=1)
    add_job(url, "g", 2_000, not_before_in_s=3600)
    fresh = _items_rows_read(url, "g", 50)
    sql(url, "ANALYZE items")
    analyzed = _items_rows_read(url, "g", 50)
    # Three (priority, job) pairs: a probe or two each to find them and when the next is due,
    # and at most a window (50) of each ready range — never the 20,000 behind them.
    assert fresh <= 3 * 50 + 20, f"read {fresh} rows of items on stale statistics"
    assert analyzed <= 3 * 50 + 20, f"read {analyzed} rows of items"


def test_the_prepared_refill_reads_a_window_per_job_with_its_generic_plan(database_url: str) -> None:
    """Past psycopg's prepare threshold the refill is a prepared statement run by its generic
    plan, built for any guid, on statistics that never saw the deep jobs: it must still read
    the ordered ranges, a window each, not the guid's or a job's whole range."""
    url = database_url
    add_job(url, "other", 500)
    sql(url, "ANALYZE items")  # statistics that predate every job below
    for g in range(4):
        add_job(url, f"g{g}", 2_000)
        add_job(url, f"g{g}", 1)

    async def refills(pool: Any) -> tuple[int, int, int]:
        queue = PostgresGuidQueue(pool)
        for n in range(20):  # past psycopg's prepare threshold and Postgres's five custom plans
            await queue.next_ready(f"g{n % 4}", [], 50)
        async with pool.connection() as conn, conn.transaction():
            row = await (await conn.execute(
                "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE '%%WITH RECURSIVE pairs%%'")).fetchone()
            assert row is not None, "the refill is a prepared statement"
            for setting in NEXT_READY_SETTINGS:
                await conn.execute(setting)
            statement = resources.files("pacer_sender.adapters.sql").joinpath("next_ready.sql").read_text()
            values = {"guid": "'g1'", "exclude": "'{}'", "limit": "50"}
            order = dict.fromkeys(re.findall(r"%\((\w+)\)[sb]", statement))  # psycopg numbers them so
            args = ", ".join(values[name] for name in order)
            plan = await (await conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {row['name']}({args})")).fetchone()

        def read(node: dict[str, Any]) -> int:
            own = 0
            if str(node.get("Relation Name", "")).startswith("items"):
                own = int((node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"])
            return own + sum(read(child) for child in node.get("Plans", []))

        return int(row["generic_plans"]), int(row["custom_plans"]), read(plan["QUERY PLAN"][0]["Plan"])

    async def one_connection(fn: Any) -> Any:
        pool = await open_pool(url, min_size=1, max_size=1)
        try:
            return await fn(pool)
        finally:
            await pool.close()

    generic, custom, rows = asyncio.run(one_connection(refills))
    assert generic > 0 and custom == 0, f"generic plans {generic}, custom {custom}"
    # two (priority, job) pairs: a probe or two each, and at most a window of each ready range
    assert rows <= 2 * 50 + 20, f"the generic plan read {rows} rows of items"
