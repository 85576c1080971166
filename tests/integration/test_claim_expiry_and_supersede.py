"""The claim is the last word before a send: an item past (or within the sender's margin of)
its expire_at is expired there, not claimed; an item of a ticket notification whose business
id has a newer status version is superseded there, not sent after the newer status; a retry
racing the planning of a newer version waits for its coalescing lock; and a retry of an
unverified item is a conflict that points to resolving it. On real Postgres, through
pacer_begin_send, pacer_begin_send_many, the sender's Executor and the Control API."""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from pacer_common.db.operations import retry_item
from pacer_common.db.pool import open_pool
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import RetryPolicy
from pacer_common.domain.receipts import Receipt
from pacer_sender import core
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.core import Executed, Executor
from tests.integration.control_support import control_api, move, rows
from tests.integration.helpers import eventually, seed_job, status_and_events, waiting_for_locks

OWNER, TTL = "w1", timedelta(seconds=30)


def one(url: str, sql: str, *args: Any) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql, args).fetchone()
    return row[0] if row is not None and len(row) == 1 else row


def sql(url: str, statement: str, *args: Any) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement, args)


def take_guids(url: str, *guids: str) -> None:
    sql(url, "SELECT * FROM pacer_acquire_guids(%s, %s, %s, '0 s')", list(guids), OWNER, TTL)


def item_row(url: str, item: str) -> tuple[str, str, str]:
    return one(url, "SELECT item_id::text, idem_key, guid FROM items WHERE item_id = %s", item)


def begin_one(url: str, item: str) -> str:
    _, key, guid = item_row(url, item)
    return one(url, "SELECT outcome FROM pacer_begin_send(%s, %s, %s, %s, %s, 'room')", item, OWNER, TTL, key, guid)


def begin_many(url: str, items: list[str]) -> dict[str, str]:
    batch = [item_row(url, i) for i in items]
    with psycopg.connect(url, autocommit=True) as conn:
        answers = conn.execute(
            "SELECT ord, outcome FROM pacer_begin_send_many(%s::uuid[], %s, %s, %s::text[], %s::text[], %s::text[])",
            ([b[0] for b in batch], OWNER, TTL, [b[1] for b in batch], [b[2] for b in batch],
             ["room"] * len(batch))).fetchall()
    return {items[o - 1]: outcome for o, outcome in answers}


def last_event(url: str, item: str) -> tuple[str, str, str, dict[str, Any]]:
    return one(url, "SELECT type, from_status::text, to_status::text, payload FROM item_events"
               " WHERE item_id = %s ORDER BY version DESC LIMIT 1", item)


def ledger_of(url: str, item: str) -> int:
    return one(url, "SELECT count(*) FROM send_ledger WHERE item_id = %s", item)


# -- A: expiry at the claim -------------------------------------------------------------------------
@pytest.mark.parametrize("begin", ["one", "many"])
@pytest.mark.parametrize("expires_in", ["-5 seconds", "500 milliseconds"])
def test_an_item_past_or_within_a_second_of_its_expire_at_is_expired_at_the_claim(
        database_url: str, begin: str, expires_in: str) -> None:
    url = database_url
    _, _, (late, fresh) = seed_job(url, {"g1": 2})
    sql(url, "UPDATE items SET expire_at = now() + %s::interval WHERE item_id = %s", expires_in, late)
    sql(url, "UPDATE items SET expire_at = now() + interval '1 hour' WHERE item_id = %s", fresh)
    take_guids(url, "g1")

    answers = ({i: begin_one(url, i) for i in (late, fresh)} if begin == "one" else begin_many(url, [late, fresh]))

    assert answers == {late: "expired", fresh: "submitted"}
    status, types = status_and_events(url, late)
    assert (status, types) == ("expired", ["ItemExpired"]), "expired straight from pending, never claimed"
    (typ, src, dst, payload) = last_event(url, late)
    assert (typ, src, dst, payload["error_class"]) == ("ItemExpired", "pending", "expired", "expired")
    assert "passed before sending" in payload["error"]
    assert one(url, "SELECT attempts, last_error_class, lease_owner FROM items WHERE item_id = %s",
               late) == (0, "expired", None)
    assert ledger_of(url, late) == 0, "nothing reserved: nothing may be sent"
    assert ledger_of(url, fresh) == 1


def test_the_sender_sends_nothing_when_the_claim_answers_expired(database_url: str) -> None:
    """The command was read before its expire_at came (its media step, say, then waited): the
    executor's first check passes, the claim expires it."""
    url = database_url
    job, _, (item,) = seed_job(url, {"g1": 1})
    sql(url, "UPDATE items SET expire_at = now() - interval '1 second' WHERE item_id = %s", item)
    gateway = RecordingGateway()

    async def scenario() -> Executed:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            await PostgresGuidLeases(pool, TTL).acquire(["g1"], OWNER)
            executor = Executor(PostgresItemRepository(pool, TTL), gateway, OWNER, RetryPolicy(),
                                rng=random.Random(0))
            return await executor.execute(command(item, job, expire_at=None))
        finally:
            await pool.close()

    assert asyncio.run(scenario()) == Executed("expired", False)
    assert gateway.calls == [] and status_and_events(url, item) == ("expired", ["ItemExpired"])
    assert ledger_of(url, item) == 0


class RecordingGateway:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def send_text(self, guid: str, to_id: str, content: str, idem_key: str,
                        deadline: float | None = None, tenant: str = "default") -> Receipt:
        self.calls.append(idem_key)
        return Receipt(0, "ok", f"m-{len(self.calls)}", 1.0)


def command(item: str, job: str, expire_at: datetime | None) -> ItemCommand:
    return ItemCommand(item_id=item, job_id=job, shard_id=1, guid="g1", to_id="room", content="hi",
                       idem_key=f"k-{item}", priority=3, kind="campaign", expire_at=expire_at)


class _Clock(datetime):
    """The executor's clock, moved on by the test (``skew``) instead of waited for."""

    skew = timedelta(0)

    @classmethod
    def now(cls, tz: Any = None) -> Any:  # a datetime, as the real one
        return datetime.now(tz) + cls.skew


def test_an_item_whose_expire_at_comes_between_the_claim_and_the_call_is_not_sent(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Claimed an hour before its expire_at; the wait before the call (the guid's pacing gap)
    outlasts it. Not sent: settled as a send that did not happen — key freed, attempt and
    budget unit given back — and then expired, never sent, at its next claim."""
    url = database_url
    job, _, (item,) = seed_job(url, {"g1": 1})
    sql(url, "UPDATE items SET expire_at = now() + interval '1 hour' WHERE item_id = %s", item)
    sql(url, "UPDATE jobs SET budget_max_sends = 5 WHERE job_id = %s", job)
    expire_at = one(url, "SELECT expire_at FROM items WHERE item_id = %s", item)
    monkeypatch.setattr(core, "datetime", _Clock)
    monkeypatch.setattr(_Clock, "skew", timedelta(0))
    gateway = RecordingGateway()
    seen: list[tuple[str, int, int]] = []

    async def gap(quiet_s: float | None = None) -> bool:
        seen.append(one(url, "SELECT i.status::text, i.attempts, j.budget_used FROM items i JOIN jobs j"
                        " USING (job_id) WHERE i.item_id = %s", item))
        _Clock.skew = timedelta(hours=1)  # the wait outlasted the item's expire_at
        return True

    async def scenario() -> Executed:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            await PostgresGuidLeases(pool, TTL).acquire(["g1"], OWNER)
            executor = Executor(PostgresItemRepository(pool, TTL), gateway, OWNER, RetryPolicy(),
                                rng=random.Random(0))
            return await executor.execute(command(item, job, expire_at), gap)
        finally:
            await pool.close()

    result = asyncio.run(scenario())

    assert seen == [("submitted", 1, 1)], "claimed and counted before the wait"
    assert (result.outcome, result.called_gateway) == ("expiring", False)
    assert gateway.calls == []
    assert one(url, "SELECT i.status::text, i.attempts, i.last_error_class, j.budget_used FROM items i"
               " JOIN jobs j USING (job_id) WHERE i.item_id = %s", item) == ("waiting_retry", 0, "not_sent", 0)
    (typ, _, _, payload) = last_event(url, item)
    assert typ == "ItemRetryScheduled" and payload.get("refund") is True
    assert "came before the gateway call" in payload["error"]
    assert ledger_of(url, item) == 0, "the key is freed: nothing was sent"
    # Its expire_at passed meanwhile: back to pending (the retry sweep), it is expired at the claim.
    sql(url, "UPDATE items SET expire_at = now() - interval '1 second' WHERE item_id = %s", item)
    sql(url, "SELECT pacer_transition(ARRAY[%s]::uuid[], '{waiting_retry}', 'pending', 'ItemRequeued')", item)
    assert begin_one(url, item) == "expired"
    assert one(url, "SELECT status::text FROM items WHERE item_id = %s", item) == "expired"


# -- B: superseded at the claim ---------------------------------------------------------------------
def tickets(url: str, key: str = "T-1", v2_stored: bool = True) -> tuple[str, str, str, str]:
    """Versions 1 and 2 of business id ``key``, one item each on g1: (v1 job, v1 item, v2 job,
    v2 item). ``v2_stored`` False: v2's job is not a version of ``key`` yet (:func:`store_v2`)."""
    v1, _, (old,) = seed_job(url, {"g1": 1})
    v2, _, (new,) = seed_job(url, {"g1": 1})
    sql(url, "UPDATE jobs SET coalesce_key = %s, coalesce_version = 1 WHERE job_id = %s", key, v1)
    if v2_stored:
        store_v2(url, v2, key)
    return v1, old, v2, new


def store_v2(url: str, v2: str, key: str = "T-1") -> None:
    sql(url, "UPDATE jobs SET coalesce_key = %s, coalesce_version = 2 WHERE job_id = %s", key, v2)


def test_a_v1_item_back_from_flight_after_v2_was_stored_is_superseded_not_sent(database_url: str) -> None:
    """v1's item was submitted when v2 was stored, so pacer_coalesce left it (in flight); then
    the gateway deferred it: waiting_retry, then pending again. Its claim supersedes it."""
    url = database_url
    _, old, v2, new = tickets(url, v2_stored=False)
    take_guids(url, "g1")
    assert begin_one(url, old) == "submitted"
    store_v2(url, v2)
    assert one(url, "SELECT pacer_coalesce(%s)", v2) == 0, "in flight: not superseded by the coalescing"
    epoch = one(url, "SELECT lease_epoch FROM items WHERE item_id = %s", old)
    assert one(url, "SELECT pacer_settle(%s, %s, %s, 'waiting_retry', 'ItemRetryScheduled', 'rate_limited',"
               " 'too fast', now(), true, NULL, true)", old, epoch, f"k-{old}") is True
    sql(url, "SELECT pacer_transition(ARRAY[%s]::uuid[], '{waiting_retry}', 'pending', 'ItemRequeued')", old)

    assert begin_one(url, old) == "not_pending"

    assert one(url, "SELECT status::text, last_error_class, lease_owner FROM items WHERE item_id = %s",
               old) == ("abandoned", "superseded", None)
    (typ, src, dst, payload) = last_event(url, old)
    assert (typ, src, dst) == ("ItemSuperseded", "pending", "abandoned")
    assert payload == {"business_id": "T-1", "by_version": 2, "error_class": "superseded"}
    assert ledger_of(url, old) == 0
    assert begin_one(url, new) == "submitted", "the newer version itself is sent"


@pytest.mark.parametrize("begin", ["one", "many"])
def test_a_pending_item_of_an_older_version_is_superseded_at_the_claim(database_url: str, begin: str) -> None:
    url = database_url
    _, old, _, new = tickets(url)
    _, _, (plain,) = seed_job(url, {"g1": 1})
    take_guids(url, "g1")

    items = [old, new, plain]
    answers = {i: begin_one(url, i) for i in items} if begin == "one" else begin_many(url, items)

    assert answers == {old: "not_pending", new: "submitted", plain: "submitted"}
    assert status_and_events(url, old) == ("abandoned", ["ItemSuperseded"])
    assert ledger_of(url, old) == 0


def test_a_retry_racing_a_newer_versions_planning_waits_for_its_coalescing_lock(database_url: str) -> None:
    """v2 is being planned (its job stored and pacer_coalesce run, not committed yet) when
    v1's failed item is retried: the retry waits for the business id's lock, then sees v2 and
    is refused — it does not queue an outdated status that v2's coalescing could not see."""
    url = database_url
    _, old, v2, _ = tickets(url, v2_stored=False)
    move(url, [old], "failed", "retryable")

    async def scenario() -> Any:
        async with await psycopg.AsyncConnection.connect(url) as planner:
            await planner.execute("UPDATE jobs SET coalesce_key = 'T-1', coalesce_version = 2 WHERE job_id = %s",
                                  (v2,))
            await planner.execute("SELECT pacer_coalesce(%s)", (v2,))
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as ops:
                retry = asyncio.create_task(retry_item(ops, old, "ops:alice"))

                async def blocked() -> bool:
                    return retry.done() or await waiting_for_locks(url)

                await eventually(blocked, 10, "the retry waiting for the coalescing lock")
                assert not retry.done(), f"the retry did not wait for v2's planning: {retry.result()}"
                await planner.commit()
                return await retry

    r = asyncio.run(scenario())
    assert r.outcome == "refused" and "superseded" in r.message and "(2 > 1)" in r.message
    assert one(url, "SELECT count(*) FROM items WHERE compensates IS NOT NULL") == 0


# -- C: a retry of an unverified item -----------------------------------------------------------------
def test_a_retry_of_an_unverified_item_is_a_conflict_that_says_to_resolve_it(database_url: str) -> None:
    url = database_url
    job, _, (item,) = seed_job(url, {"g1": 1})
    take_guids(url, "g1")
    assert begin_one(url, item) == "submitted"  # its key reserved; the answer is then lost
    for src, dst, typ in (("submitted", "recovery_pending", "ItemInDoubt"),
                          ("recovery_pending", "unverified", "ItemUnverified")):
        sql(url, "SELECT pacer_transition(ARRAY[%s]::uuid[], ARRAY[%s]::item_status[], %s::item_status, %s)",
            item, src, dst, typ)

    async def api() -> tuple[Any, Any, Any]:
        async with control_api(url) as c:
            single = await c.post(f"/items/{item}/retry", "operator")
            bulk = await c.post(f"/jobs/{job}/retry", "operator", json={"item_ids": [item]})
            by_filter = await c.post(f"/jobs/{job}/retry", "operator", json={"filter": {"status": "unverified"}})
            return single, bulk, by_filter

    single, bulk, by_filter = asyncio.run(api())

    assert single.status_code == 409
    body = single.json()
    assert (body["outcome"], body["result"], body["new_item"]) == ("conflict", "conflict", None)
    assert "unverified" in body["detail"] and f"/items/{item}/resolve" in body["detail"]
    # Said so that it is right for a token scoped to tenants too, which may not resolve.
    assert "by a tech_admin or admin token not scoped to tenants" in body["detail"]
    assert bulk.status_code == 200
    (result,) = bulk.json()["results"]
    assert result["outcome"] == "conflict" and "it is resolved instead" in result["message"]
    # A filter never picks them: every one would be this conflict.
    assert by_filter.status_code == 422 and "In doubt page" in by_filter.json()["detail"]
    assert rows(url, "SELECT count(*) AS n FROM items WHERE compensates IS NOT NULL") == [{"n": 0}]
    assert one(url, "SELECT status::text FROM items WHERE item_id = %s", item) == "unverified"
    assert one(url, "SELECT state FROM send_ledger WHERE item_id = %s", item) == "reserved"
    assert one(url, "SELECT array_agg(reason) FROM operator_conflicts WHERE item_id = %s", item) == [
        "unverified", "unverified"]
