"""Exactly-once at two edges, on the real database:

- A job's cancel abandons what waits, but a send in flight at the cancel may come back to
  waiting afterwards (scheduled again, verified or resolved as not delivered). It must be
  abandoned then (by the retry sweep, by the send's begin, by a repeated cancel), never left
  pending and held under a job that never runs again.
- A forced release of a submitted item fences its holder, but the holder's call may still
  reach the gateway until its lease would have run out: the verifier must not look the send
  up before then (a lookup that finds nothing makes the item pending: a second send).

Every step goes through the code the services run: the sender's repository (begin, settle),
the reconciler's PostgresLog (sweeps, in-doubt reads and verdicts), the operator functions.
Time is never waited for: where a lease must have run out, the row says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest

from pacer_common.db.pool import Pool, open_pool
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.status import ItemStatus
from pacer_reconciler.adapters.postgres import PostgresLog
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.domain.decisions import Decision
from tests.integration.helpers import one, seed_job
from tests.integration.helpers import tuples as rows

ACTOR = "token:alice"
TTL = timedelta(seconds=30)
T = TypeVar("T")




def cancel(url: str, job: str, actor: str = ACTOR) -> tuple[str, str, str]:
    return one(url, "SELECT * FROM pacer_job_action(%s, 'cancel', %s, 'customer complaint')", job, actor)


def cmds_of(url: str, job: str) -> list[ItemCommand]:
    return [ItemCommand(item_id=str(i), job_id=job, shard_id=s, guid=g, to_id=t, content="hi", idem_key=k,
                        priority=3, kind="campaign")
            for i, s, g, t, k in rows(url, "SELECT item_id, shard_id, guid, to_id, idem_key FROM items"
                                           " WHERE job_id = %s ORDER BY item_id", job)]


def status(url: str, item: str) -> str:
    return one(url, "SELECT status::text FROM items WHERE item_id = %s", item)


def last_event(url: str, item: str) -> tuple[str, dict[str, Any]]:
    return one(url, "SELECT type, payload FROM item_events WHERE item_id = %s ORDER BY version DESC LIMIT 1", item)


def ledger(url: str, item: str) -> list[str]:
    return [s for (s,) in rows(url, "SELECT state FROM send_ledger WHERE item_id = %s", item)]


def with_sender(url: str, guids: list[str], fn: Callable[[Pool, PostgresItemRepository], Awaitable[T]]) -> T:
    """``fn`` with a pool and a sender's item repository that holds the leases of ``guids``."""

    async def go() -> T:
        pool = await open_pool(url, min_size=1, max_size=8)
        try:
            await PostgresGuidLeases(pool, TTL).acquire(guids, "w1")
            return await fn(pool, PostgresItemRepository(pool, TTL))
        finally:
            await pool.close()

    return asyncio.run(go())


def begin(url: str, cmds: list[ItemCommand]) -> list[tuple[str, int | None]]:
    """Begin each send as a sender does (batched: pacer_begin_send_many)."""

    async def go(_pool: Pool, repo: PostgresItemRepository) -> list[tuple[str, int | None]]:
        return [(b.outcome, b.epoch) for b in await asyncio.gather(*(repo.begin_send(c, "w1") for c in cmds))]

    return with_sender(url, sorted({c.guid for c in cmds}), go)


def settle(url: str, c: ItemCommand, epoch: int, d: Decision) -> bool:
    async def go(_pool: Pool, repo: PostgresItemRepository) -> bool:
        return await repo.settle(c, epoch, d)

    return with_sender(url, [c.guid], go)


def retry_at(at: datetime) -> Decision:
    return Decision(ItemStatus.WAITING_RETRY, "ItemRetryScheduled", "not_sent", "connection refused",
                    next_attempt_at=at, release_ledger=True)


IN_DOUBT = Decision(ItemStatus.RECOVERY_PENDING, "ItemInDoubt", "in_doubt", "read timeout")


def reconciler(url: str, fn: Callable[[PostgresLog], Awaitable[T]], verify_after: timedelta = timedelta(0)) -> T:
    async def go() -> T:
        pool = await open_pool(url, min_size=1, max_size=4)
        try:
            return await fn(PostgresLog(pool, "reconciler", timedelta(seconds=300), verify_after))
        finally:
            await pool.close()

    return asyncio.run(go())


def sweep_retries(url: str) -> int:
    async def go(log: PostgresLog) -> int:
        return await log.sweep("retry_due", 100)

    return reconciler(url, go)


def in_doubt(url: str, verify_after: timedelta = timedelta(0)) -> list[str]:
    async def go(log: PostgresLog) -> list[str]:
        return [d.item_id for d in await log.in_doubt(100)]

    return reconciler(url, go, verify_after)


def verify(url: str, item: str, found: bool | None, now: datetime | None = None) -> str | None:
    """The verifier's verdict on ``item`` (read as due_in_doubt reads it) for a lookup that
    answered ``found``."""

    async def go(log: PostgresLog) -> str | None:
        (due,) = [d for d in await log.in_doubt(100) if d.item_id == item]
        return await log.resolve(due, found, now or datetime.now(UTC))

    return reconciler(url, go)


def assert_abandoned_by_the_cancel(url: str, item: str, actor: str = ACTOR) -> None:
    assert status(url, item) == "abandoned"
    kind, payload = last_event(url, item)
    assert kind == "ItemCancelled"
    assert (payload["scope"], payload["actor"], payload["error_class"]) == ("job", actor, "cancelled")
    assert ledger(url, item) == []  # its key was freed when the send came back; nothing holds it
    assert one(url, "SELECT held FROM items WHERE item_id = %s", item) is False


# -- defect 1: items of a cancelled job that come back to waiting -------------------------------
def test_a_send_in_flight_at_the_cancel_scheduled_again_is_abandoned_by_the_retry_sweep(database_url: str) -> None:
    url = database_url
    job, _, _ = seed_job(url, {"g1": 3})
    other, _, _ = seed_job(url, {"g2": 1})
    cmds, (kept,) = cmds_of(url, job), cmds_of(url, other)
    ((outcome, epoch),) = begin(url, cmds[:1])  # in flight when the job is cancelled
    assert outcome == "submitted" and epoch is not None
    ((kept_outcome, kept_epoch),) = begin(url, [kept])
    assert kept_outcome == "submitted" and kept_epoch is not None
    assert cancel(url, job)[0::2] == ("done", "cancelled")
    assert dict(rows(url, "SELECT status::text, count(*) FROM items WHERE job_id = %s GROUP BY 1", job)) == {
        "submitted": 1, "abandoned": 2}

    # Its send fails, not sent: scheduled again, due now; the running job's is due later.
    now = one(url, "SELECT now()")
    assert settle(url, cmds[0], epoch, retry_at(now - timedelta(seconds=1)))
    assert settle(url, kept, kept_epoch, retry_at(now + timedelta(hours=1)))
    assert status(url, cmds[0].item_id) == "waiting_retry" and ledger(url, cmds[0].item_id) == []

    assert sweep_retries(url) == 0  # nothing re-queued: the cancelled job's retry is abandoned
    assert_abandoned_by_the_cancel(url, cmds[0].item_id)
    assert one(url, "SELECT count(*) FROM items WHERE job_id = %s AND status <> 'abandoned'", job) == 0

    # The running job's retry, once due, is re-queued as before.
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE items SET next_attempt_at = now() - interval '1 second' WHERE item_id = %s",
                     (kept.item_id,))
    assert sweep_retries(url) == 1
    assert status(url, kept.item_id) == "pending" and last_event(url, kept.item_id)[0] == "ItemRequeued"


@pytest.mark.parametrize("way", ["verified_not_delivered", "resolved_not_delivered"])
@pytest.mark.parametrize("begun_by", ["pacer_begin_send_many", "pacer_begin_send"])
def test_an_item_of_a_cancelled_job_back_in_pending_is_abandoned_when_its_send_begins(
        database_url: str, way: str, begun_by: str) -> None:
    url = database_url
    job, _, _ = seed_job(url, {"g1": 2})
    cmds = cmds_of(url, job)
    begun = begin(url, cmds)
    assert [o for o, _ in begun] == ["submitted", "submitted"]
    assert cancel(url, job)[0::2] == ("done", "cancelled")  # nothing waited: both in flight
    c, epoch = cmds[0], begun[0][1]
    assert epoch is not None
    assert settle(url, c, epoch, IN_DOUBT)  # the answer was lost: verified, key kept meanwhile
    assert ledger(url, c.item_id) == ["reserved"]
    if way == "verified_not_delivered":
        assert verify(url, c.item_id, False) == "pending"
    else:
        assert verify(url, c.item_id, None, datetime.now(UTC) + timedelta(hours=1)) == "unverified"
        assert one(url, "SELECT outcome FROM pacer_resolve_unverified(%s, false, %s, 'not in the chat')",
                   c.item_id, ACTOR) == "done"
    assert status(url, c.item_id) == "pending" and ledger(url, c.item_id) == []  # its command is published again

    if begun_by == "pacer_begin_send_many":
        ((outcome, _),) = begin(url, [c])
    else:
        async def single(pool: Pool, _repo: PostgresItemRepository) -> str:
            async with pool.connection() as conn:
                row = await (await conn.execute(
                    "SELECT outcome FROM pacer_begin_send(%s, 'w1', %s, %s, %s, %s)",
                    (c.item_id, TTL, c.idem_key, c.guid, c.to_id))).fetchone()
            assert row is not None
            return str(row["outcome"])

        outcome = with_sender(url, [c.guid], single)
    assert outcome == "not_pending"  # not held: a cancelled job is never resumed to release it
    assert_abandoned_by_the_cancel(url, c.item_id)


def test_a_repeated_cancel_abandons_what_came_back(database_url: str) -> None:
    url = database_url
    job, _, _ = seed_job(url, {"g1": 3})
    cmds = cmds_of(url, job)
    begun = begin(url, cmds[:2])
    assert [o for o, _ in begun] == ["submitted", "submitted"]
    assert cancel(url, job)[0::2] == ("done", "cancelled")
    (a, ea), (b, eb) = zip(cmds[:2], (e for _, e in begun), strict=True)
    assert ea is not None and eb is not None
    now = one(url, "SELECT now()")
    assert settle(url, a, ea, retry_at(now + timedelta(hours=1)))  # waiting, not due yet
    assert settle(url, b, eb, IN_DOUBT)
    assert verify(url, b.item_id, False) == "pending"
    # As a begin before this fix left it: pending, marked held under the cancelled job.
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE items SET held = true WHERE item_id = %s", (b.item_id,))

    # The job's status is already so, but what waits is abandoned, audited and counted: done
    # (domain/job_status.py, CANCEL_LEFT_OVER), in the name of the one who cancelled again.
    outcome, message, job_status = cancel(url, job, "ops@night")
    assert (outcome, job_status) == ("done", "cancelled") and "2 of its items" in message
    for c in (a, b):
        assert_abandoned_by_the_cancel(url, c.item_id, "ops@night")
    assert one(url, "SELECT count(*) FROM items WHERE job_id = %s AND status <> 'abandoned'", job) == 0
    assert rows(url, "SELECT before->>'status', after->>'status', (after->>'abandoned')::int FROM audit_log"
                     " WHERE target_id = %s AND action = 'cancel' ORDER BY id", job) == [
        ("running", "cancelled", 1), ("cancelled", "cancelled", 2)]
    outcome, message, _ = cancel(url, job)  # nothing waits now: a plain noop, not audited
    assert (outcome, message) == ("noop", "job is already cancelled")
    assert one(url, "SELECT count(*) FROM audit_log WHERE target_id = %s AND action = 'cancel'", job) == 2


# -- defect 2: a forced release of a submitted item ---------------------------------------------
def test_a_force_released_send_is_not_verified_before_its_holders_lease_would_have_run_out(database_url: str) -> None:
    url = database_url
    job, _, _ = seed_job(url, {"g1": 2})
    live, expired = cmds_of(url, job)
    begun = begin(url, [live, expired])
    assert [o for o, _ in begun] == ["submitted", "submitted"]
    lease_until = one(url, "SELECT lease_until FROM items WHERE item_id = %s", live.item_id)
    # The second holder's lease has run out already (a holder gone long ago, not yet swept).
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE items SET lease_until = now() - interval '1 second' WHERE item_id = %s",
                     (expired.item_id,))

    for c in (live, expired):
        outcome, _message, from_status, to_status, _epoch = one(
            url, "SELECT * FROM pacer_force_release_item(%s, %s, 'stuck holder')", c.item_id, ACTOR)
        assert (outcome, from_status, to_status) == ("done", "submitted", "recovery_pending")
    # The holder is fenced: its outcome is refused, whatever its call did.
    assert not settle(url, live, begun[0][1] or 0, retry_at(datetime.now(UTC)))
    assert one(url, "SELECT lease_owner FROM items WHERE item_id = %s", live.item_id) is None
    assert ledger(url, live.item_id) == ["reserved"]

    # The holder may still be calling the gateway until its lease would have run out: no lookup
    # before then, however short the settling time. The one whose lease was over is looked up.
    assert in_doubt(url) == [expired.item_id]
    assert in_doubt(url, timedelta(seconds=15)) == []

    # Once the lease would have run out, the send is verified as any in-doubt send.
    assert lease_until > one(url, "SELECT now()")
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE items SET lease_until = now() - interval '1 second' WHERE item_id = %s",
                     (live.item_id,))
    assert set(in_doubt(url)) == {live.item_id, expired.item_id}
    assert verify(url, live.item_id, True) == "confirmed"
    assert ledger(url, live.item_id) == ["sent"]
