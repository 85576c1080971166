"""Exactly-once that does not lean on server settings, claims that cover their send, and
rate limits that defer instead of failing: the sender's steps on a real Postgres."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pacer_common.db.pool import open_pool
from pacer_common.db.transitions import Transition, apply
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass, RetryPolicy, SendError
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.status import ItemStatus as S
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.core import Executed, Executor
from pacer_sender.domain.decisions import after_failure
from tests.integration.helpers import seed_job

TTL = timedelta(seconds=30)
SEND_DEADLINE_S = TTL.total_seconds() / 4  # what main() gives the Executor


def cmd(item_id: str, job_id: str, guid: str = "g1") -> ItemCommand:
    return ItemCommand(item_id=item_id, job_id=job_id, shard_id=1, guid=guid, to_id="room", content="hi",
                       idem_key=f"k-{item_id}", priority=3, kind="campaign")


def one(url: str, sql: str, *args: Any) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, args).fetchone()


async def requeue(url: str, item_id: str) -> None:
    """The reconciler's retry sweep: waiting_retry → pending once due (here: now)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        moved = await apply(conn, Transition("ItemRequeued", S.PENDING, frozenset({S.WAITING_RETRY})), [item_id])
    assert moved, f"{item_id} was not waiting"


# -- item 8a: synchronous commit, whatever the database default ---------------------------

PROBE = """
CREATE TABLE sync_probe (what text NOT NULL, setting text NOT NULL);
CREATE FUNCTION probe_item_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sync_probe VALUES (NEW.type, current_setting('synchronous_commit'));
    RETURN NULL;
END $$;
CREATE FUNCTION probe_guid_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sync_probe VALUES ('guid_lease ' || TG_OP, current_setting('synchronous_commit'));
    RETURN NULL;
END $$;
CREATE TRIGGER probe AFTER INSERT ON item_events FOR EACH ROW EXECUTE FUNCTION probe_item_event();
CREATE TRIGGER probe AFTER INSERT OR UPDATE ON guid_leases FOR EACH ROW EXECUTE FUNCTION probe_guid_lease();
"""


def test_every_send_path_commit_is_synchronous_when_the_database_default_is_off(database_url: str) -> None:
    """With ``ALTER DATABASE … SET synchronous_commit = off``, each transaction of the send
    path still runs with it on: a trigger in those very transactions reads the setting."""
    job, _, (sent, deferred, late) = seed_job(database_url, {"g1": 3})
    dbname = database_url.rsplit("/", 1)[1]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" SET synchronous_commit = off')
        conn.execute(PROBE)
    # The default really is off for a new connection of the database (else this proves nothing).
    assert one(database_url, "SELECT current_setting('synchronous_commit')") == ("off",)

    async def scenario() -> None:
        pool = await open_pool(database_url, min_size=1, max_size=4)
        leases = PostgresGuidLeases(pool, TTL)
        repo = PostgresItemRepository(pool, TTL)
        await leases.acquire(["g1"], "w1")  # take
        assert [lease.guid for lease in await leases.acquire(["g1"], "w1")] == ["g1"]  # renew
        begun = await repo.begin_send(cmd(sent, job), "w1")
        assert begun.epoch is not None
        assert await repo.confirm(cmd(sent, job), begun.epoch, Receipt(0, "ok", "m-1", 1.0))
        begun = await repo.begin_send(cmd(deferred, job), "w1")
        assert begun.epoch is not None
        limited = after_failure(SendError(FailureClass.RATE_LIMITED, 45009, "too fast"), 1, RetryPolicy(),
                                datetime.now(UTC), random.Random(0))
        assert await repo.settle(cmd(deferred, job), begun.epoch, limited)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE items SET expire_at = now() - interval '1 second' WHERE item_id = %s", (late,))
        assert await repo.expire(cmd(late, job))
        assert await leases.release(["g1"], "w1") == 1
        await pool.close()

    asyncio.run(scenario())
    with psycopg.connect(database_url, autocommit=True) as conn:
        seen = conn.execute("SELECT what, setting FROM sync_probe").fetchall()
    whats = {w for w, _ in seen}
    assert {"ItemClaimed", "ItemSubmitted", "ItemConfirmed", "ItemRetryScheduled", "ItemExpired",
            "guid_lease UPDATE"} <= whats, whats
    assert [(w, s) for w, s in seen if s != "on"] == [], "a send-path transaction committed asynchronously"


# -- item 8c: a claim leaves the guid lease valid for the whole send ----------------------

def test_a_claim_extends_a_guid_lease_about_to_run_out_past_the_send(database_url: str) -> None:
    job, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario() -> str:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        await PostgresGuidLeases(pool, TTL).acquire(["g1"], "w1")
        async with pool.connection() as conn:  # the last renewal is late: one second left
            await conn.execute("UPDATE guid_leases SET lease_until = now() + interval '1 second'")
        begun = await PostgresItemRepository(pool, TTL).begin_send(cmd(item, job), "w1")
        await pool.close()
        return begun.outcome

    assert asyncio.run(scenario()) == "submitted"
    guid_until, item_until, claimed_at = one(
        database_url,
        "SELECT g.lease_until, i.lease_until, e.occurred_at FROM guid_leases g, items i JOIN item_events e"
        " ON e.item_id = i.item_id AND e.type = 'ItemClaimed' WHERE g.guid = 'g1' AND i.item_id = %s", item)
    assert guid_until >= item_until, "the guid lease lasts as long as the item lease it covers"
    assert guid_until >= claimed_at + timedelta(seconds=SEND_DEADLINE_S) * 2, \
        "valid for the send deadline and the gateway timeout after the claim"


@pytest.mark.parametrize("lease", ["expired", "other_owner", "released"])
def test_a_claim_under_a_lease_that_is_not_live_and_ours_is_refused_and_extends_nothing(
        database_url: str, lease: str) -> None:
    job, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario() -> str:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        leases = PostgresGuidLeases(pool, TTL)
        await leases.acquire(["g1"], "w1")
        async with pool.connection() as conn:
            if lease == "expired":
                await conn.execute("UPDATE guid_leases SET lease_until = now() - interval '1 millisecond'")
            elif lease == "other_owner":
                await conn.execute("UPDATE guid_leases SET owner = 'w2'")
        if lease == "released":
            await leases.release(["g1"], "w1")
        before = one(database_url, "SELECT owner, lease_until FROM guid_leases")
        begun = await PostgresItemRepository(pool, TTL).begin_send(cmd(item, job), "w1")
        assert one(database_url, "SELECT owner, lease_until FROM guid_leases") == before
        await pool.close()
        return begun.outcome

    assert asyncio.run(scenario()) == "guid_lost"
    assert one(database_url, "SELECT status::text, attempts FROM items WHERE item_id = %s", item) == ("pending", 0)


# -- item 10: a rate limit is a deferral ---------------------------------------------------

class ScriptedGateway:
    """Answers "too fast" (code 45009, as classified by the default code table) ``limited``
    times, then accepts."""

    def __init__(self, limited: int) -> None:
        self.limited = limited
        self.calls = 0

    async def send_text(self, guid: str, to_id: str, content: str, idem_key: str,
                        deadline: float | None = None, tenant: str = "default") -> Receipt:
        self.calls += 1
        if self.calls <= self.limited:
            raise SendError(FailureClass.RATE_LIMITED, 45009, "freq limit")
        return Receipt(0, "ok", f"m-{self.calls}", 1.0)


def test_rate_limited_answers_use_up_neither_attempts_nor_budget(database_url: str) -> None:
    """More "too fast" answers than the item has attempts and the job has budget: the item
    keeps waiting with reason rate_limited, nothing counted; then it is sent once."""
    job, _, (item,) = seed_job(database_url, {"g1": 1})
    policy = RetryPolicy(max_attempts=3, base=timedelta(milliseconds=1), cap=timedelta(milliseconds=10))
    one(database_url, "UPDATE jobs SET budget_max_sends = 2 WHERE job_id = %s RETURNING 1", job)
    rounds = 6
    gateway = ScriptedGateway(limited=rounds)

    async def scenario() -> list[Executed]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        await PostgresGuidLeases(pool, TTL).acquire(["g1"], "w1")
        executor = Executor(PostgresItemRepository(pool, TTL), gateway, "w1", policy, rng=random.Random(1),
                            send_deadline_s=SEND_DEADLINE_S)
        results = []
        for _ in range(rounds):
            results.append(await executor.execute(cmd(item, job)))
            row = one(database_url, "SELECT i.status::text, i.attempts, i.last_error_class, j.budget_used, j.status"
                      " FROM items i JOIN jobs j USING (job_id) WHERE i.item_id = %s", item)
            assert row == ("waiting_retry", 0, "rate_limited", 0, "running")
            assert one(database_url, "SELECT count(*) FROM send_ledger") == (0,), "not sent: the key is free"
            await requeue(database_url, item)
        results.append(await executor.execute(cmd(item, job)))
        await pool.close()
        return results

    results = asyncio.run(scenario())
    assert [r.outcome for r in results] == ["rate_limited"] * rounds + ["confirmed"]
    assert one(database_url, "SELECT i.status::text, i.attempts, j.budget_used FROM items i JOIN jobs j"
               " USING (job_id) WHERE i.item_id = %s", item) == ("confirmed", 1, 1)


def test_a_refund_gives_back_only_a_budget_unit_that_was_counted(database_url: str) -> None:
    """A job given a budget after the claim did not count that send: the deferral leaves
    the new budget's count alone. A settle by a fenced sender gives nothing back."""
    job, _, (item,) = seed_job(database_url, {"g1": 1})
    limited = after_failure(SendError(FailureClass.RATE_LIMITED, 45009, "too fast"), 1, RetryPolicy(),
                            datetime.now(UTC), random.Random(0))

    async def scenario() -> tuple[bool, bool]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        await PostgresGuidLeases(pool, TTL).acquire(["g1"], "w1")
        repo = PostgresItemRepository(pool, TTL)
        begun = await repo.begin_send(cmd(item, job), "w1")
        assert begun.epoch is not None
        one(database_url, "UPDATE jobs SET budget_max_sends = 10, budget_used = 3 WHERE job_id = %s RETURNING 1", job)
        stale = await repo.settle(cmd(item, job), begun.epoch - 1, limited)
        fresh = await repo.settle(cmd(item, job), begun.epoch, limited)
        await pool.close()
        return stale, fresh

    assert asyncio.run(scenario()) == (False, True)
    assert one(database_url, "SELECT i.attempts, j.budget_used FROM items i JOIN jobs j USING (job_id)"
               " WHERE i.item_id = %s", item) == (0, 3)


# -- a refusal is dated when its send began -------------------------------------------------

def test_a_refusal_settled_after_the_account_came_back_does_not_hold_the_guid(database_url: str) -> None:
    """A send is refused as unauthorized while the account comes back: its online callback,
    dated after the send began, is applied before the refusal is settled. The guid stays
    online (the refusal is older news) and the item goes again. A send begun after the
    callback and refused holds the guid."""
    job, _, (first, second) = seed_job(database_url, {"g1": 2})
    unauthorized = SendError(FailureClass.NEEDS_HUMAN, 1003, "account not authorized")

    def state() -> tuple[str, str]:
        return one(database_url, "SELECT state::text, source FROM guid_states WHERE guid = 'g1'")

    async def refused(repo: PostgresItemRepository, item: str, callback_meanwhile: bool) -> bool:
        begun = await repo.begin_send(cmd(item, job), "w1")
        assert begun.epoch is not None
        if callback_meanwhile:  # as the reconciler applies a device.status callback
            one(database_url, "SELECT changed FROM pacer_set_guid_state('g1', 'online', 'callback', NULL,"
                              " clock_timestamp())")
        decision = after_failure(unauthorized, 1, RetryPolicy(), datetime.now(UTC), random.Random(0))
        return await repo.settle(cmd(item, job), begun.epoch, decision)

    async def scenario() -> list[tuple[str, str]]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        await PostgresGuidLeases(pool, TTL).acquire(["g1"], "w1")
        repo = PostgresItemRepository(pool, TTL)
        states = []
        assert await refused(repo, first, callback_meanwhile=True)
        states.append(state())
        assert await refused(repo, second, callback_meanwhile=False)
        states.append(state())
        await pool.close()
        return states

    assert asyncio.run(scenario()) == [("online", "callback"), ("unauthorized", "send_failure")]
    assert one(database_url, "SELECT status::text FROM items WHERE item_id = %s", first) == ("waiting_retry",)
