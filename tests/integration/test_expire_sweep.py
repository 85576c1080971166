"""Items no worker will reach still expire: the reconciler's ``expire_due`` sweep.

The sender expires an item past its ``expire_at`` when the item reaches the front of its
guid's queue, and sheds those of a live worker's queue; nothing of a guid that is not online
or is paused, of a paused job or shard, or of a job awaiting approval is ever at the front.
The sweep moves such items (pending, held or not, and waiting_retry) to ``expired`` with the
sender's event, through the guarded transition, in bounded batches, for the segments a
replica holds; the tail then moves their shards' counts and completes a shard left with
nothing open.

Every step goes through the code the services run: the sender's repository (begin, settle)
and the reconciler (sweeps and tail, publishing to Kafka). Time is never waited for: an
``expire_at`` that has passed is written in the row.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest

from pacer_common.db.migrate import migrate
from pacer_common.db.pool import open_pool
from pacer_common.db.transitions import Transition, apply
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass, RetryPolicy, SendError
from pacer_common.domain.status import ItemStatus as S
from pacer_common.kafka import ensure_topics, make_producer
from pacer_reconciler.adapters.kafka import KafkaPublisher
from pacer_reconciler.adapters.postgres import PostgresLog
from pacer_reconciler.core import Reconciler
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.domain.decisions import after_failure
from tests.integration.helpers import eventually, one, read_topic, seed_job, waiting_for_locks
from tests.integration.helpers import tuples as rows

T = TypeVar("T")
TTL = timedelta(seconds=30)




def execute(url: str, statement: str, *args: Any) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(statement, args)


def expire_ago(url: str, items: list[str], seconds: float) -> None:
    execute(url, "UPDATE items SET expire_at = now() - make_interval(secs => %s) WHERE item_id = ANY(%s::uuid[])",
            seconds, items)


def status(url: str, item: str) -> str:
    return one(url, "SELECT status::text FROM items WHERE item_id = %s", item)


def last_event(url: str, item: str) -> tuple[str, str, str, dict[str, Any]]:
    return one(url, "SELECT type, from_status::text, to_status::text, payload FROM item_events WHERE item_id = %s"
                    " ORDER BY version DESC LIMIT 1", item)


def counts(url: str, shard: int) -> dict[str, int]:
    return dict(rows(url, "SELECT status::text, n FROM shard_status_counts WHERE shard_id = %s AND n <> 0", shard))


def command(url: str, item: str) -> ItemCommand:
    i, job, shard, guid, to_id, key = one(
        url, "SELECT item_id::text, job_id::text, shard_id, guid, to_id, idem_key FROM items WHERE item_id = %s", item)
    return ItemCommand(item_id=i, job_id=job, shard_id=shard, guid=guid, to_id=to_id, content="hi", idem_key=key,
                       priority=3, kind="campaign")


def refused_offline(url: str, item: str) -> None:
    """The item's send begun as a sender begins it, and refused by the gateway with the code
    for an offline account: the item waits (waiting_retry, key freed), the guid is offline."""

    async def go() -> None:
        pool = await open_pool(url, min_size=1, max_size=4)
        try:
            cmd = command(url, item)
            await PostgresGuidLeases(pool, TTL).acquire([cmd.guid], "w1")
            repo = PostgresItemRepository(pool, TTL)
            begun = await repo.begin_send(cmd, "w1")
            assert begun.outcome == "submitted" and begun.epoch is not None, begun
            d = after_failure(SendError(FailureClass.NEEDS_HUMAN, 1001, "account offline"), 1, RetryPolicy(),
                              datetime.now(UTC), random.Random(1))
            assert await repo.settle(cmd, begun.epoch, d)
        finally:
            await pool.close()

    asyncio.run(go())


def claimed(url: str, item: str) -> None:
    """Claimed by a live sender: its lease runs five more minutes."""

    async def go() -> None:
        async with await psycopg.AsyncConnection.connect(url) as conn, conn.transaction():
            await apply(conn, Transition("ItemClaimed", S.CLAIMED, frozenset({S.PENDING}), lease_owner="w1",
                                         lease_ttl=timedelta(minutes=5)), [item])

    asyncio.run(go())


def with_log(url: str, fn: Callable[[PostgresLog], Awaitable[T]], *, segments: int = 1,
             owned: list[int] | None = None) -> T:
    async def go() -> T:
        pool = await open_pool(url, min_size=1, max_size=4)
        try:
            return await fn(PostgresLog(pool, "reconciler", timedelta(seconds=300), segments=segments,
                                        owned=None if owned is None else (lambda: owned)))
        finally:
            await pool.close()

    return asyncio.run(go())


def sweep(url: str, limit: int = 100, *, segments: int = 1, owned: list[int] | None = None) -> int:
    async def go(log: PostgresLog) -> int:
        return await log.sweep("expire_due", limit)

    return with_log(url, go, segments=segments, owned=owned)


@pytest.fixture
def topics(kafka_config: dict[str, str], topic_prefix: str) -> tuple[str, str]:
    outcomes, commands = f"{topic_prefix}.item-outcomes", f"{topic_prefix}.item-commands"
    ensure_topics(kafka_config, {outcomes: (1, {}), commands: (1, {})})
    return outcomes, commands


def test_items_no_worker_reaches_expire_and_their_shards_follow(
        database_url: str, kafka_config: dict[str, str], topics: tuple[str, str]) -> None:
    url = database_url
    # A paused job: its item is held wherever it is, never at a sender's front.
    paused_job, paused_shards, (held,) = seed_job(url, {"g-paused": 1})
    # A running job: a guid whose send was refused as offline (the item waits, the guid is
    # held), with a second item not yet expired; a guid with an item claimed by a live sender.
    running_job, shards, (refused, later, in_hand) = seed_job(url, {"g-off": 2, "g-busy": 1})
    execute(url, "UPDATE jobs SET status = 'running' WHERE job_id = %s", running_job)
    refused_offline(url, refused)
    claimed(url, in_hand)
    execute(url, "UPDATE jobs SET status = 'paused', paused_reason = 'operator', paused_by = 't', paused_at = now()"
                 " WHERE job_id = %s", paused_job)
    assert one(url, "SELECT state::text FROM guid_states WHERE guid = 'g-off'") == "offline"
    assert (status(url, refused), status(url, in_hand)) == ("waiting_retry", "claimed")
    key = one(url, "SELECT idem_key FROM items WHERE item_id = %s", refused)
    assert rows(url, "SELECT state FROM send_ledger WHERE idem_key = %s", key) == [], "the refusal freed the key"
    expire_ago(url, [held, refused, in_hand], 60)
    execute(url, "UPDATE items SET expire_at = now() + interval '1 hour' WHERE item_id = %s", later)

    async def scenario() -> tuple[dict[str, int], int]:
        pool = await open_pool(url, min_size=1, max_size=4)
        try:
            store = PostgresLog(pool, "reconciler", timedelta(seconds=300))
            rec = Reconciler(store, store, KafkaPublisher(make_producer(kafka_config), topics[0],
                                                          lambda lane: topics[1]))
            report = await rec.sweep_once()
            tailed = 0
            while n := await rec.tail_once():
                tailed += n
            return report.moved, tailed
        finally:
            await pool.close()

    moved, tailed = asyncio.run(scenario())
    assert moved["expire_due"] == 2 and moved["retry_due"] == 0, moved
    assert tailed > 0
    assert {i: status(url, i) for i in (held, refused, later, in_hand)} == {
        held: "expired", refused: "expired", later: "pending", in_hand: "claimed"}
    for item, was in ((held, "pending"), (refused, "waiting_retry")):
        kind, src, dst, payload = last_event(url, item)
        assert (kind, src, dst, payload["error_class"]) == ("ItemExpired", was, "expired", "expired")
        assert one(url, "SELECT last_error_class FROM items WHERE item_id = %s", item) == "expired"
    # The key stays as the sender's own expiry leaves it: nothing was reserved, nothing is.
    assert rows(url, "SELECT state FROM send_ledger WHERE idem_key = %s", key) == []
    # The tail moved the counts: the paused job's shard has nothing open and is completed;
    # the job stays paused (an operator's resume completes it).
    assert counts(url, paused_shards["g-paused"]) == {"expired": 1}
    assert counts(url, shards["g-off"]) == {"expired": 1, "pending": 1}
    assert counts(url, shards["g-busy"]) == {"claimed": 1}
    assert one(url, "SELECT status FROM shards WHERE shard_id = %s", paused_shards["g-paused"]) == "completed"
    assert one(url, "SELECT status FROM shards WHERE shard_id = %s", shards["g-off"]) == "running"
    assert one(url, "SELECT status FROM jobs WHERE job_id = %s", paused_job) == "paused"
    published = read_topic(kafka_config, topics[0], expect=6)
    expired = sorted(m["value"]["item_id"] for m in published if m["headers"]["pacer-event-type"] == b"ItemExpired")
    assert expired == sorted([held, refused])


def test_a_bounded_batch_soonest_expired_first(database_url: str) -> None:
    url = database_url
    _, _, items = seed_job(url, {"g-batch": 5})
    execute(url, "UPDATE jobs SET status = 'awaiting_approval'")
    for age, item in enumerate(items):  # the first item expired longest ago
        expire_ago(url, [item], 600 - age * 60)
    assert sweep(url, limit=2) == 2
    assert [status(url, i) for i in items] == ["expired"] * 2 + ["pending"] * 3
    assert sweep(url, limit=2) == 2
    assert sweep(url, limit=2) == 1
    assert sweep(url, limit=2) == 0
    assert {status(url, i) for i in items} == {"expired"}


def test_a_replica_expires_the_items_of_its_own_segments_only(database_url: str) -> None:
    url = database_url
    _, _, (item,) = seed_job(url, {"g-seg": 1})
    execute(url, "UPDATE jobs SET status = 'paused'")
    expire_ago(url, [item], 5)
    mine = one(url, "SELECT (hashtext(%s) & 2147483647) %% 16", "g-seg")
    assert sweep(url, segments=16, owned=[s for s in range(16) if s != mine]) == 0
    assert status(url, item) == "pending"
    assert sweep(url, segments=16, owned=[mine]) == 1
    assert status(url, item) == "expired"


def test_an_item_of_a_cancelled_job_is_abandoned_not_expired(database_url: str) -> None:
    """A send in flight at the cancel came back to waiting: abandoned as the cancel would."""
    url = database_url
    job, _, (item,) = seed_job(url, {"g-cancel": 1})
    execute(url, "UPDATE items SET status = 'waiting_retry', next_attempt_at = now() + interval '1 hour'")
    execute(url, "UPDATE jobs SET status = 'cancelled', paused_by = 'token:alice' WHERE job_id = %s", job)
    expire_ago(url, [item], 5)
    assert sweep(url) == 0
    assert status(url, item) == "abandoned"
    assert last_event(url, item)[0] == "ItemCancelled"


def test_nothing_is_read_until_the_index_is_valid(database_url: str) -> None:
    """Without items_expire_due the sweep would read every queued item each round: it moves
    nothing until migrate has built the index (online), then catches up."""
    url = database_url
    _, _, (item,) = seed_job(url, {"g-idx": 1})
    expire_ago(url, [item], 5)
    execute(url, "DROP INDEX items_expire_due")
    assert sweep(url) == 0
    assert status(url, item) == "pending"
    migrate(url)
    assert sweep(url) == 1
    assert status(url, item) == "expired"


def tail(url: str, kafka_config: dict[str, str], topics: tuple[str, str]) -> None:
    """Every event so far projected, as the reconciler's tail does."""

    async def go(log: PostgresLog) -> None:
        rec = Reconciler(log, log, KafkaPublisher(make_producer(kafka_config), topics[0], lambda lane: topics[1]))
        while await rec.tail_once():
            pass

    with_log(url, go)


def test_a_job_or_shard_whose_items_all_expired_while_held_completes_when_released(
        database_url: str, kafka_config: dict[str, str], topics: tuple[str, str]) -> None:
    """Nothing would complete them otherwise: the reconciler completes a job or shard when an
    event of it moves, and with every item expired none comes."""
    url = database_url
    awaiting, _, awaiting_items = seed_job(url, {"g-a1": 1, "g-a2": 1})
    execute(url, "UPDATE jobs SET status = 'awaiting_approval', paused_reason = 'new content' WHERE job_id = %s",
            awaiting)
    running, shards, running_items = seed_job(url, {"g-s1": 1, "g-s2": 1})
    other, other_shards, (other_expired, other_open) = seed_job(url, {"g-o1": 1, "g-o2": 1})
    for job in (running, other):
        execute(url, "UPDATE jobs SET status = 'running' WHERE job_id = %s", job)
    for shard in (shards["g-s1"], other_shards["g-o1"]):
        execute(url, "UPDATE shards SET status = 'paused', paused_reason = 'operator', paused_by = 't'"
                     " WHERE shard_id = %s", shard)
    expire_ago(url, [*awaiting_items, *running_items, other_expired], 5)
    assert sweep(url) == 5
    tail(url, kafka_config, topics)
    # The tail completed the shard that was not paused; the paused one waits for its resume.
    assert one(url, "SELECT status FROM shards WHERE shard_id = %s", shards["g-s2"]) == "completed"
    assert one(url, "SELECT status FROM jobs WHERE job_id = %s", running) == "running"

    def act(statement: str, *args: Any) -> tuple[str, str, str]:
        return one(url, statement, *args)

    outcome, message, after = act("SELECT * FROM pacer_decide_approval(%s, true, 'admin', NULL)", awaiting)
    assert (outcome, after) == ("done", "completed"), message
    assert "nothing of it was left to send" in message
    assert one(url, "SELECT status, finished_at IS NOT NULL FROM jobs WHERE job_id = %s", awaiting) == (
        "completed", True)
    assert one(url, "SELECT after->>'status' FROM audit_log WHERE action = 'approve' AND target_id = %s",
               awaiting) == "completed", "the audit says what the approval did"
    # The job's last open shard resumed with nothing left: both complete, and the answer says so.
    _, message, after = act("SELECT * FROM pacer_shard_action(%s, 'resume', 'ops')", shards["g-s1"])
    assert after == "completed"
    assert message.endswith(f"nothing of it was left open (its items ended while it was paused: expired, sent or "
                            f"cancelled); job {running} completed too: this was its last open shard"), message
    assert one(url, "SELECT status, finished_at IS NOT NULL FROM jobs WHERE job_id = %s", running) == (
        "completed", True)
    # A shard resumed with nothing left while another of its job's is open: the job runs on.
    _, message, after = act("SELECT * FROM pacer_shard_action(%s, 'resume', 'ops')", other_shards["g-o1"])
    assert after == "completed" and "nothing of it was left open" in message and "completed too" not in message
    assert one(url, "SELECT status FROM jobs WHERE job_id = %s", other) == "running"
    # A shard resumed with an item still open runs.
    execute(url, "UPDATE shards SET status = 'paused', paused_reason = 'operator' WHERE shard_id = %s",
            other_shards["g-o2"])
    assert act("SELECT * FROM pacer_shard_action(%s, 'resume', 'ops')", other_shards["g-o2"])[2] == "running"
    assert status(url, other_open) == "pending"


def test_a_shard_resumed_while_the_reconciler_completes_the_jobs_other_shard_completes_the_job(
        database_url: str) -> None:
    """The reconciler completes the job's other shard and holds the job's row (its refresh
    reads the resumed shard still paused, so it leaves the job running); the resume waits for
    the row and must then see that shard completed, or the job runs for good with every shard
    completed."""
    url = database_url
    job, shards, (paused_item, last_item) = seed_job(url, {"g-r1": 1, "g-r2": 1})
    execute(url, "UPDATE jobs SET status = 'running', started_at = now() WHERE job_id = %s", job)
    execute(url, "UPDATE shards SET status = 'paused', paused_reason = 'operator' WHERE shard_id = %s",
            shards["g-r1"])
    execute(url, "UPDATE items SET status = 'expired' WHERE item_id = %s", paused_item)

    async def race() -> str:
        async with (await psycopg.AsyncConnection.connect(url) as reconciler,
                    await psycopg.AsyncConnection.connect(url, autocommit=True) as operator):
            await reconciler.execute("UPDATE items SET status = 'confirmed' WHERE item_id = %s", (last_item,))
            await reconciler.execute("UPDATE shards SET status = 'completed' WHERE shard_id = %s", (shards["g-r2"],))
            await reconciler.execute("SELECT 1 FROM jobs WHERE job_id = %s FOR NO KEY UPDATE", (job,))
            resume = asyncio.create_task(operator.execute(
                "SELECT status FROM pacer_shard_action(%s, 'resume', 'ops')", (shards["g-r1"],)))
            await eventually(lambda: waiting_for_locks(url), 10, "the resume waiting for the job's row")
            await reconciler.commit()  # the job left running: its refresh read the other shard paused
            return str((await (await resume).fetchone() or ("",))[0])

    assert asyncio.run(race()) == "completed"
    assert one(url, "SELECT status FROM jobs WHERE job_id = %s", job) == "completed"
