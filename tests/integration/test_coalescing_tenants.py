"""Coalescing is per tenant: a business id is its tenant's own, so the same id under two
tenants is two chains. A newer status version of one never supersedes the other's items —
not when the planner stores it, not at the claim (pacer_begin_send, pacer_begin_send_many),
not on a manual retry — and one tenant's planning never holds the other's retry on its lock;
within one tenant the chain still coalesces. On real Postgres."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pacer_common.db.operations import retry_item
from pacer_common.db.pool import open_pool
from pacer_common.domain.requests import JobRequest
from pacer_planner.adapters.postgres import PostgresJobStore
from pacer_planner.domain.planning import plan
from tests.integration.control_support import move, rows
from tests.integration.helpers import one, seed_job, sql, status_and_events

OWNER, TTL = "w1", timedelta(seconds=30)
TICKET = "42"


def ticket(tenant: str, guid: str, version: int) -> JobRequest:
    return JobRequest.model_validate({
        "request_id": f"ticket-{tenant}-{TICKET}-v{version}-{uuid.uuid4().hex[:6]}", "kind": "ticket_notify",
        "created_by": "crm", "message": {"content": f"ticket {TICKET} now at status {version}"},
        "business_id": TICKET, "status_version": version, "tenant": tenant,
        "targets": {"items": [{"guid": guid, "to_id": f"room-{tenant}"}]},
    })


def statuses(url: str) -> dict[str, list[str]]:
    """tenant:version → the statuses of its items."""
    return {r["v"]: r["s"] for r in rows(url, "SELECT j.tenant || ':' || j.coalesce_version AS v,"
                                              " array_agg(DISTINCT i.status::text) AS s"
                                              " FROM items i JOIN jobs j USING (job_id) GROUP BY 1")}


def test_the_planner_supersedes_within_a_tenant_never_across(database_url: str) -> None:
    """acme queues ticket 42 at status 1; default, with its own numbering, publishes its ticket
    42 at version 5: acme's item stays queued. acme's own status 2 supersedes it; default's
    late version 3 is superseded at once by default's 5, and acme's 2 is left alone."""
    url = database_url
    sql(url, "INSERT INTO tenants (name) VALUES ('acme')")
    now = datetime.now(UTC)

    async def go(*requests: JobRequest) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            store = PostgresJobStore(pool)
            for r in requests:
                await store.store(plan(r, now, timedelta(seconds=3)))
        finally:
            await pool.close()

    asyncio.run(go(ticket("acme", "g1", 1), ticket("default", "g2", 5)))
    assert statuses(url) == {"acme:1": ["pending"], "default:5": ["pending"]}
    assert one(url, "SELECT count(*) FROM item_events WHERE type = 'ItemSuperseded'") == 0

    asyncio.run(go(ticket("acme", "g1", 2), ticket("default", "g2", 3)))
    assert statuses(url) == {"acme:1": ["abandoned"], "acme:2": ["pending"],
                             "default:3": ["abandoned"], "default:5": ["pending"]}
    assert rows(url, "SELECT j.tenant, e.payload->>'by_version' AS by FROM item_events e"
                     " JOIN items i ON i.item_id = e.item_id JOIN jobs j ON j.job_id = i.job_id"
                     " WHERE e.type = 'ItemSuperseded' ORDER BY j.tenant") == [
        {"tenant": "acme", "by": "2"}, {"tenant": "default", "by": "3"}]


def chain(url: str, tenant: str, guid: str, version: int) -> tuple[str, str]:
    """A job of ``tenant``'s ticket 42 at ``version``, one pending item on ``guid``: (job, item)."""
    job, _, (item,) = seed_job(url, {guid: 1})
    sql(url, "UPDATE jobs SET tenant = %s, coalesce_key = %s, coalesce_version = %s WHERE job_id = %s",
        tenant, TICKET, version, job)
    return job, item


def begin(url: str, items: list[str], how: str) -> dict[str, str]:
    batch = [one(url, "SELECT item_id::text, idem_key, guid FROM items WHERE item_id = %s", i) for i in items]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT * FROM pacer_acquire_guids(%s, %s, %s, '0 s')",
                     (sorted({b[2] for b in batch}), OWNER, TTL))
        if how == "one":
            return {i: conn.execute("SELECT outcome FROM pacer_begin_send(%s, %s, %s, %s, %s, 'room')",
                                    (i, OWNER, TTL, key, guid)).fetchone()[0] for i, key, guid in batch}
        answers = conn.execute(
            "SELECT ord, outcome FROM pacer_begin_send_many(%s::uuid[], %s, %s, %s::text[], %s::text[], %s::text[])",
            ([b[0] for b in batch], OWNER, TTL, [b[1] for b in batch], [b[2] for b in batch],
             ["room"] * len(batch))).fetchall()
    return {items[o - 1]: outcome for o, outcome in answers}


@pytest.mark.parametrize("how", ["one", "many"])
def test_the_claim_supersedes_within_a_tenant_never_across(database_url: str, how: str) -> None:
    url = database_url
    sql(url, "INSERT INTO tenants (name) VALUES ('acme')")
    _, acme_v1 = chain(url, "acme", "g1", 1)
    _, default_v1 = chain(url, "default", "g2", 1)
    _, default_v5 = chain(url, "default", "g2", 5)

    answers = begin(url, [acme_v1, default_v1, default_v5], how)

    assert answers == {acme_v1: "submitted", default_v1: "not_pending", default_v5: "submitted"}
    assert status_and_events(url, acme_v1)[0] == "submitted"
    assert status_and_events(url, default_v1) == ("abandoned", ["ItemSuperseded"])


def test_a_retry_is_refused_only_by_a_newer_version_of_its_own_tenant(database_url: str) -> None:
    url = database_url
    sql(url, "INSERT INTO tenants (name) VALUES ('acme')")
    _, acme_v1 = chain(url, "acme", "g1", 1)
    _, default_v1 = chain(url, "default", "g2", 1)
    chain(url, "default", "g2", 5)
    move(url, [acme_v1, default_v1], "failed", "retryable")

    async def retry(item: str) -> Any:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            return await retry_item(conn, item, "ops:alice")

    acme, default = asyncio.run(retry(acme_v1)), asyncio.run(retry(default_v1))

    assert acme.outcome == "created", acme.message
    assert default.outcome == "refused" and "(5 > 1)" in default.message


def test_one_tenants_planning_does_not_hold_another_tenants_retry_on_its_lock(database_url: str) -> None:
    """default's version 2 is being planned (pacer_coalesce run, not committed: it holds the
    chain's lock) when acme's failed item of its own ticket 42 is retried: the retry goes on
    at once. A retry of default's version 1 would wait (test_claim_expiry_and_supersede)."""
    url = database_url
    sql(url, "INSERT INTO tenants (name) VALUES ('acme')")
    _, acme_v1 = chain(url, "acme", "g1", 1)
    chain(url, "default", "g2", 1)
    default_v2, _ = chain(url, "default", "g2", 2)
    move(url, [acme_v1], "failed", "retryable")

    async def scenario() -> Any:
        async with await psycopg.AsyncConnection.connect(url) as planner:
            await planner.execute("SELECT pacer_coalesce(%s)", (default_v2,))
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as ops:
                await ops.execute("SET lock_timeout = '2s'")
                result = await retry_item(ops, acme_v1, "ops:alice")
            await planner.rollback()
            return result

    r = asyncio.run(scenario())
    assert r.outcome == "created", r.message


def test_resolving_an_unverified_send_says_superseded_only_for_a_newer_version_of_its_tenant(
        database_url: str) -> None:
    url = database_url
    sql(url, "INSERT INTO tenants (name) VALUES ('acme')")
    _, acme_v1 = chain(url, "acme", "g1", 1)
    _, default_v1 = chain(url, "default", "g2", 1)
    chain(url, "default", "g2", 5)
    for item in (acme_v1, default_v1):
        move(url, [item], "claimed")
        for src, dst, typ in (("claimed", "submitted", "ItemSubmitted"), ("submitted", "recovery_pending", "ItemInDoubt"),
                              ("recovery_pending", "unverified", "ItemUnverified")):
            sql(url, "SELECT pacer_transition(ARRAY[%s]::uuid[], ARRAY[%s]::item_status[], %s::item_status, %s)",
                item, src, dst, typ)

    def resolve(item: str) -> str:
        return one(url, "SELECT message FROM pacer_resolve_unverified(%s, false, 'ops:alice', 'not in the chat')", item)

    assert resolve(acme_v1).endswith("pending again, it will be sent under the same key")
    assert "but version 5 of its business id superseded it" in resolve(default_v1)


def test_an_older_version_keeps_a_finished_newer_job_from_pruning_only_within_its_tenant(database_url: str) -> None:
    """Long-finished version 2 jobs without items of ticket 42, one per tenant; only default has
    an older version (1) with an item left. default's version 2 stays, acme's goes."""
    url = database_url
    sql(url, "INSERT INTO tenants (name) VALUES ('acme')")
    long_ago = datetime(2001, 1, 1, tzinfo=UTC)
    done: dict[str, str] = {}
    for tenant in ("acme", "default"):
        done[tenant], _, _ = seed_job(url, {}, created_at=long_ago)
        sql(url, "UPDATE jobs SET status = 'completed', tenant = %s, coalesce_key = %s, coalesce_version = 2"
                 " WHERE job_id = %s", tenant, TICKET, done[tenant])
    chain(url, "default", "g2", 1)

    assert one(url, "SELECT pacer_prune_jobs(now() - interval '7 days')") == 1
    left = {r["job_id"] for r in rows(url, "SELECT job_id::text FROM jobs WHERE job_id = ANY(%s::uuid[])",
                                      list(done.values()))}
    assert left == {done["default"]}
