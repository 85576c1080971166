"""Control that really takes effect, on real Postgres: a forced release evicts the guid's
holder (fenced), item leases can be force-released, a retry that could never be sent is
refused, limit changes are read in commit order, budgets never deadlock two senders."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from urllib.parse import urlencode

import psycopg
import pytest
from psycopg.rows import dict_row

from pacer_common.db import operations
from pacer_common.db.pool import open_pool
from pacer_common.domain.receipts import Receipt
from pacer_sender.adapters.postgres import (
    PostgresGuidLeases,
    PostgresItemRepository,
    PostgresLimitsSource,
)
from pacer_sender.domain.pacing import Limits
from pacer_sender.limits import LimitsBook
from tests.integration.control_support import audit, control_api, move, rows
from tests.integration.helpers import cmd, seed_job, status_and_events

TTL = timedelta(seconds=30)


def force_release(url: str, guid: str, actor: str = "token:admin") -> dict:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute("SELECT * FROM pacer_force_release_guid(%s, %s, 'test')", (guid, actor)).fetchone()  # type: ignore[return-value]  # the function returns one row: None would fail the caller's assertion


# -- guid leases ------------------------------------------------------------------------------
def test_a_force_released_holder_can_neither_renew_nor_send_nor_take_the_guid_back(database_url: str) -> None:
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def before_release() -> int:
        pool = await open_pool(database_url, min_size=1, max_size=4)
        (lease,) = await PostgresGuidLeases(pool, TTL).acquire(["g1"], "w1")
        await pool.close()
        return lease.epoch

    async def after_release(epoch: int) -> tuple[dict[str, float | None], str, list, list]:
        pool = await open_pool(database_url, min_size=1, max_size=4)
        leases = PostgresGuidLeases(pool, TTL)
        kept = await leases.renew({"g1": epoch}, "w1")
        begun = await PostgresItemRepository(pool, TTL).begin_send(cmd(item, "k1"), "w1")
        again = await leases.acquire(["g1"], "w1")
        other = await leases.acquire(["g1"], "w2")
        await pool.close()
        return kept, begun.outcome, again, other

    epoch = asyncio.run(before_release())
    released = force_release(database_url, "g1")
    assert (released["outcome"], released["previous_owner"], released["epoch"]) == ("done", "w1", epoch + 1)
    kept, outcome, again, other = asyncio.run(after_release(epoch))
    assert not kept, "a renewal must not take a released lease back"
    assert outcome == "guid_lost" and status_and_events(database_url, item) == ("pending", [])
    assert again == [], "the evicted holder may not take the guid back before its lease would have run out"
    assert [(lease.guid, lease.epoch) for lease in other] == [("g1", epoch + 2)]
    (entry,) = audit(database_url, "g1")
    assert (entry["actor"], entry["action"], entry["before"]["owner"], entry["after"]["evicted_owner"]) == (
        "token:admin", "release_lock", "w1", "w1")


def test_the_evicted_holder_takes_the_guid_again_once_its_released_lease_would_have_run_out(
        database_url: str) -> None:
    async def scenario() -> list:
        pool = await open_pool(database_url, min_size=1, max_size=4)
        leases = PostgresGuidLeases(pool, TTL)
        await leases.acquire(["g1"], "w1")
        force_release(database_url, "g1")
        async with pool.connection() as conn:
            await conn.execute("UPDATE guid_leases SET evicted_until = now() - interval '1 second'")
        back = await leases.acquire(["g1"], "w1")
        await pool.close()
        return back

    (back,) = asyncio.run(scenario())
    assert back.epoch == 3  # taken (1), released (2), taken again (3)
    assert rows(database_url, "SELECT evicted_owner FROM guid_leases") == [{"evicted_owner": None}]


def test_no_successor_takes_a_released_guid_while_the_evicted_holders_send_is_in_flight(database_url: str) -> None:
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario() -> tuple[list, bool, list]:
        pool = await open_pool(database_url, min_size=1, max_size=4)
        leases = PostgresGuidLeases(pool, TTL)
        repo = PostgresItemRepository(pool, TTL)
        await leases.acquire(["g1"], "w1")
        begun = await repo.begin_send(cmd(item, "k1"), "w1")  # the request is on the wire
        assert begun.epoch is not None
        released = force_release(database_url, "g1")
        assert released["in_flight"] == 1
        waiting = await leases.acquire(["g1"], "w2")
        confirmed = await repo.confirm(cmd(item, "k1"), begun.epoch, Receipt(0, "ok", "m", 1.0))
        taken = await leases.acquire(["g1"], "w2")
        await pool.close()
        return waiting, confirmed, taken

    waiting, confirmed, taken = asyncio.run(scenario())
    assert waiting == [] and confirmed and [lease.guid for lease in taken] == ["g1"]


def test_releasing_a_guid_without_holder_is_a_noop_and_an_unknown_guid_is_not_found(database_url: str) -> None:
    assert force_release(database_url, "nobody")["outcome"] == "not_found"
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO guid_leases (guid) VALUES ('g1')")
    assert force_release(database_url, "g1")["outcome"] == "noop"
    assert audit(database_url) == []


def test_a_stale_locks_page_does_not_evict_the_sender_that_took_the_guid_over_since(database_url: str) -> None:
    # The admin opens the Locks page while sender-1 holds g1 and confirms its release; meanwhile
    # sender-1's lease runs out and sender-2 takes the guid over. The click must not fence the
    # healthy sender-2.
    async def scenario() -> None:
        pool = await open_pool(database_url, min_size=1, max_size=4)
        leases = PostgresGuidLeases(pool, TTL)
        (held,) = await leases.acquire(["g1"], "sender-1")
        async with control_api(database_url) as api:
            c, auth = api.client, api.auth("admin")
            page = (await c.get("http://control/console/part/locks", headers=auth)).text
            form = re.search(r'<form[^>]*hx-post="/console/part/guids/g1/release-lock".*?</form>', page, re.S)
            assert form, page
            fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(0)))
            assert fields == {"expected_owner": "sender-1", "expected_epoch": str(held.epoch)}
            async with pool.connection() as conn:
                await conn.execute("UPDATE guid_leases SET lease_until = now() - interval '1 second'")
            (taken,) = await leases.acquire(["g1"], "sender-2")
            clicked = await c.post("http://control/console/part/guids/g1/release-lock",
                                   content=urlencode({**fields, "reason": "sender-1 is stuck"}),
                                   headers=auth | {"Content-Type": "application/x-www-form-urlencoded"})
            assert clicked.status_code == 200 and "not released" in clicked.text and "sender-2" in clicked.text, \
                clicked.text
            api_stale = await api.post("/guids/g1/release-lock", "admin", json={
                "reason": "stuck", "expected_owner": "sender-1", "expected_epoch": held.epoch})
            assert api_stale.status_code == 409, api_stale.text
            assert f"held by sender-2 (epoch {taken.epoch}) now" in api_stale.json()["detail"]
            (lease,) = rows(database_url, "SELECT owner, epoch FROM guid_leases WHERE guid = 'g1'")
            assert lease == {"owner": "sender-2", "epoch": taken.epoch}, "sender-2 keeps its lease"
            assert audit(database_url, "g1") == []
            # The holder shown now is released; and without an expected holder, whoever holds it (as before).
            current = await api.post("/guids/g1/release-lock", "admin", json={
                "reason": "stuck", "expected_owner": "sender-2", "expected_epoch": taken.epoch})
            assert current.status_code == 200 and current.json()["previous_owner"] == "sender-2", current.text
        await pool.close()

    asyncio.run(scenario())


def test_an_item_lease_is_released_only_from_the_holder_the_caller_names(database_url: str) -> None:
    _, _, (item,) = seed_job(database_url, {"g1": 1})
    move(database_url, [item], "claimed")

    async def scenario() -> None:
        async with control_api(database_url) as api:
            stale = await api.post(f"/items/{item}/release-lock", "admin", json={
                "reason": "stuck", "expected_owner": "w1", "expected_epoch": 0})
            assert stale.status_code == 409 and "lease of w1 (epoch 1) now" in stale.json()["detail"], stale.text
            other = await api.post(f"/items/{item}/release-lock", "admin", json={
                "reason": "stuck", "expected_owner": "w9"})
            assert other.status_code == 409, other.text
            ok = await api.post(f"/items/{item}/release-lock", "admin", json={
                "reason": "stuck", "expected_owner": "w1", "expected_epoch": 1})
            assert ok.status_code == 200 and ok.json()["status"] == "pending", ok.text

    asyncio.run(scenario())
    assert len(audit(database_url, item)) == 1


# -- item leases ------------------------------------------------------------------------------
def test_a_claimed_item_released_goes_back_to_pending_with_a_new_epoch(database_url: str) -> None:
    _, _, (item,) = seed_job(database_url, {"g1": 1})
    move(database_url, [item], "claimed")

    async def scenario() -> tuple[int, int]:
        async with control_api(database_url) as api:
            refused = (await api.post(f"/items/{item}/release-lock", "tech_admin", json={"reason": "x"})).status_code
            r = await api.post(f"/items/{item}/release-lock", "admin", json={"reason": "worker host is gone"})
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "pending" and "nothing was sent" in r.json()["message"]
            again = await api.post(f"/items/{item}/release-lock", "admin", json={"reason": "again"})
            assert "holds no lease" in again.json()["detail"]
            return refused, again.status_code

    assert asyncio.run(scenario()) == (403, 409)
    (row,) = rows(database_url, "SELECT status::text, lease_epoch, lease_owner FROM items")
    assert row == {"status": "pending", "lease_epoch": 2, "lease_owner": None}
    (entry,) = audit(database_url, item)
    assert (entry["actor"], entry["reason"], entry["before"]["status"], entry["after"]["status"]) == (
        "token:admin", "worker host is gone", "claimed", "pending")


def test_a_submitted_item_released_is_verified_never_resent_and_its_holder_is_fenced(database_url: str) -> None:
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario() -> bool:
        pool = await open_pool(database_url, min_size=1, max_size=4)
        await PostgresGuidLeases(pool, TTL).acquire(["g1"], "w1")
        repo = PostgresItemRepository(pool, TTL)
        begun = await repo.begin_send(cmd(item, "k1"), "w1")
        assert begun.epoch is not None
        async with control_api(database_url) as api:
            r = await api.post(f"/items/{item}/release-lock", "admin", json={"reason": "sender stalled"})
            assert (r.status_code, r.json()["status"]) == (200, "recovery_pending"), r.text
        late = await repo.confirm(cmd(item, "k1"), begun.epoch, Receipt(0, "ok", "m", 1.0))
        await pool.close()
        return late

    assert asyncio.run(scenario()) is False, "the old holder's confirm must be refused (fenced)"
    assert status_and_events(database_url, item) == ("recovery_pending", ["ItemClaimed", "ItemSubmitted", "ItemInDoubt"])
    locks = rows(database_url, "SELECT * FROM audit_log WHERE action = 'release_lock' AND target_type = 'item'")
    assert len(locks) == 1


# -- refused retries --------------------------------------------------------------------------
def _retry(url: str, item: str) -> operations.RetryResult:
    async def run() -> operations.RetryResult:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            return await operations.retry_item(conn, item, "ops:test")

    return asyncio.run(run())


@pytest.mark.parametrize("job_status", ["cancelled", "terminated"])
def test_a_retry_in_a_cancelled_or_terminated_job_is_refused_with_the_reason(database_url: str,
                                                                             job_status: str) -> None:
    job, _, (item, other) = seed_job(database_url, {"g1": 2})
    move(database_url, [item, other], "failed", "needs_human")
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET status = %s", (job_status,))
    r = _retry(database_url, item)
    assert (r.outcome, r.new_item) == ("refused", None) and f"is {job_status}" in r.message
    assert ("publish a new job request" if job_status == "cancelled" else "resume the job first") in r.message

    async def api() -> tuple[int, str, dict]:
        async with control_api(database_url) as c:
            single = await c.post(f"/items/{other}/retry", "operator")
            bulk = (await c.post(f"/jobs/{job}/retry", "operator",
                                 json={"filter": {"status": "failed"}})).json()
            return single.status_code, single.json()["detail"], bulk

    code, detail, bulk = asyncio.run(api())
    assert code == 409 and f"is {job_status}" in detail
    assert bulk["totals"]["refused"] == 2 and all(f"is {job_status}" in r["message"] for r in bulk["results"])
    assert rows(database_url, "SELECT count(*) AS n FROM items WHERE compensates IS NOT NULL") == [{"n": 0}]


def test_a_retry_of_a_superseded_ticket_notification_is_refused(database_url: str) -> None:
    old, _, (item,) = seed_job(database_url, {"g1": 1})
    new, _, _ = seed_job(database_url, {"g1": 1})
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET coalesce_key = 'ticket-7', coalesce_version = 1 WHERE job_id = %s", (old,))
        conn.execute("UPDATE jobs SET coalesce_key = 'ticket-7', coalesce_version = 2 WHERE job_id = %s", (new,))
    move(database_url, [item], "failed", "retryable")
    r = _retry(database_url, item)
    assert r.outcome == "refused" and "superseded" in r.message and "(2 > 1)" in r.message


def test_a_retry_in_a_paused_job_is_created_and_says_what_it_waits_for(database_url: str) -> None:
    job, _, (item,) = seed_job(database_url, {"g1": 1})
    move(database_url, [item], "failed", "retryable")
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET status = 'paused', paused_reason = 'budget_exhausted'")
    r = _retry(database_url, item)
    assert r.outcome == "created" and r.message.endswith("waiting: job paused: budget_exhausted")

    async def shown() -> dict[str, str | None]:
        async with control_api(database_url) as api:
            page = (await api.get(f"/jobs/{job}/items", "operator")).json()
            return {i["item_id"]: i["waiting"] for i in page["items"]}

    assert asyncio.run(shown()) == {item: None, r.new_item: "waiting: job paused: budget_exhausted"}


# -- hot limits in commit order ---------------------------------------------------------------
def test_a_limit_change_committed_after_a_later_stamped_one_is_still_read(database_url: str) -> None:
    upsert = ("INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 't') ON CONFLICT (guid)"
              " DO UPDATE SET limits = EXCLUDED.limits, updated_at = clock_timestamp()")

    async def scenario() -> tuple[float, float, float]:
        pool = await open_pool(database_url, min_size=1, max_size=4)
        book = LimitsBook(Limits(min_interval_s=1.0), PostgresLimitsSource(pool))
        early = psycopg.connect(database_url)
        early.execute(upsert, ("g1", '{"min_interval_s": 7}'))  # stamped first, still open
        with psycopg.connect(database_url) as late:
            late.execute(upsert, ("g2", '{"min_interval_s": 9}'))  # stamped later, committed first
        await book.refresh()
        seen_while_open = book("g1").min_interval_s
        early.commit()
        early.close()
        await book.refresh()
        await pool.close()
        return seen_while_open, book("g1").min_interval_s, book("g2").min_interval_s

    while_open, g1, g2 = asyncio.run(scenario())
    assert while_open == 1.0
    assert (g1, g2) == (7.0, 9.0), "the change committed late must not be skipped"


# -- budgets without deadlocks ----------------------------------------------------------------
def test_two_senders_on_two_budgeted_jobs_never_deadlock_and_count_exactly(database_url: str) -> None:
    """Sender A's guids meet job X before job Y in its batches, sender B's meet Y before X;
    without one lock order on the jobs, their batches deadlock."""
    rounds, per_side, budget = 12, 6, 100
    a_x = [f"ga{i:02d}" for i in range(per_side)]  # A: X first (guids sort first) …
    a_y = [f"gb{i:02d}" for i in range(per_side)]  # … then Y
    b_y = [f"gc{i:02d}" for i in range(per_side)]  # B: Y first …
    b_x = [f"gd{i:02d}" for i in range(per_side)]  # … then X
    job_x, _, _ = seed_job(database_url, {g: rounds for g in a_x + b_x})
    job_y, _, _ = seed_job(database_url, {g: rounds for g in a_y + b_y})
    items = {(r["guid"], r["n"]): (r["item_id"], r["idem_key"]) for r in rows(
        database_url, "SELECT item_id::text, idem_key, guid,"
        " row_number() OVER (PARTITION BY guid ORDER BY item_id) AS n FROM items")}
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET budget_max_sends = %s", (budget,))
    sql = ("SELECT outcome FROM pacer_begin_send_many(%s::uuid[], %s, interval '30 seconds', %s::text[],"
           " %s::text[], %s::text[])")

    async def sender(owner: str, guids: list[str]) -> list[str]:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await conn.execute("SELECT pacer_acquire_guids(%s, %s, interval '1 hour')", (guids, owner))
            await conn.commit()
            outcomes: list[str] = []
            for n in range(1, rounds + 1):
                batch = [items[(g, n)] for g in guids]
                got = await conn.execute(sql, ([i for i, _ in batch], owner, [k for _, k in batch], guids,
                                               ["room"] * len(guids)))
                outcomes += [r[0] for r in await got.fetchall()]
                await conn.commit()
            return outcomes

    async def both() -> tuple[list[str], list[str]]:
        return await asyncio.gather(sender("A", a_x + a_y), sender("B", b_y + b_x))

    results = asyncio.run(both())  # a deadlock raises psycopg.errors.DeadlockDetected
    submitted = sum(o == "submitted" for r in results for o in r)
    assert submitted == 2 * budget
    for job in (job_x, job_y):
        (row,) = rows(database_url, "SELECT j.budget_used, j.status, (SELECT count(*) FROM items i"
                      " WHERE i.job_id = j.job_id AND i.status = 'submitted') AS sent FROM jobs j WHERE job_id = %s",
                      job)
        assert row == {"budget_used": budget, "status": "paused", "sent": budget}
