"""The reconciler tails the event log without ever skipping an event, and projects progress."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
import pytest

from pacer_common.db.pool import open_pool
from pacer_common.db.transitions import Transition, apply
from pacer_common.domain.status import ItemStatus as S
from pacer_common.kafka import ensure_topics, make_producer
from pacer_reconciler.adapters.backlog import PostgresBacklogs
from pacer_reconciler.adapters.kafka import KafkaPublisher
from pacer_reconciler.adapters.postgres import PostgresLog
from pacer_reconciler.core import Reconciler
from tests.conftest import with_db
from tests.integration.helpers import eventually, read_topic, seed_job

CLAIM = Transition("ItemClaimed", S.CLAIMED, frozenset({S.PENDING}), lease_owner="w", lease_ttl=timedelta(seconds=30))


@pytest.fixture
def topics(kafka_config: dict[str, str], topic_prefix: str) -> tuple[str, str]:
    outcomes, commands = f"{topic_prefix}.item-outcomes", f"{topic_prefix}.item-commands"
    ensure_topics(kafka_config, {outcomes: (1, {}), commands: (1, {})})
    return outcomes, commands


async def _reconciler(url: str, kafka_config: dict[str, str], topics: tuple[str, str]):
    pool = await open_pool(url, min_size=1, max_size=2)
    store = PostgresLog(pool, "reconciler", timedelta(seconds=60))
    rec = Reconciler(store, store, KafkaPublisher(make_producer(kafka_config), topics[0], lambda lane: topics[1]))
    return pool, rec


def test_event_committed_after_a_later_numbered_one_is_not_skipped(
    database_url: str, kafka_config: dict[str, str], topics: tuple[str, str]
) -> None:
    _, _, (first, second) = seed_job(database_url, {"g1": 2})

    async def scenario() -> tuple[int, int, int]:
        pool, rec = await _reconciler(database_url, kafka_config, topics)
        slow = await psycopg.AsyncConnection.connect(database_url)
        try:
            # The slow transaction takes the lower sequence number and stays open …
            await apply(slow, CLAIM, [first])
            # … while a later-numbered event commits.
            async with await psycopg.AsyncConnection.connect(database_url) as fast, fast.transaction():
                await apply(fast, CLAIM, [second])
            while_open = await rec.tail_once()
            await slow.commit()
            after_commit = await rec.tail_once()
            again = await rec.tail_once()
            return while_open, after_commit, again
        finally:
            await slow.close()
            await pool.close()

    while_open, after_commit, again = asyncio.run(scenario())
    assert while_open == 0, "nothing may be read past an open transaction's event"
    assert after_commit == 2
    assert again == 0
    published = read_topic(kafka_config, topics[0], expect=2)
    assert sorted(m["value"]["item_id"] for m in published) == sorted([first, second])
    # each outcome names its job's tenant in a header, as callbacks do; the body is unchanged
    assert {m["headers"]["pacer-tenant"] for m in published} == {b"default"}
    assert all("tenant" not in m["value"] for m in published)


def test_an_items_outcomes_go_out_in_version_order_when_its_moves_took_their_transaction_ids_the_other_way(
    database_url: str, kafka_config: dict[str, str], topics: tuple[str, str]
) -> None:
    """A transaction takes its id at its first write or lock (a cancel locks its job row first),
    and moves the item after another transaction that took a later id: the log, read in
    transaction-id order, holds the item's later version first. Consumers keyed by item get
    its versions in order."""
    _, _, (item,) = seed_job(database_url, {"g1": 1})
    submit = Transition("ItemSubmitted", S.SUBMITTED, frozenset({S.CLAIMED}))

    async def scenario() -> int:
        pool, rec = await _reconciler(database_url, kafka_config, topics)
        early = await psycopg.AsyncConnection.connect(database_url)
        try:
            await early.execute("SELECT pg_current_xact_id()")  # the lower transaction id, taken first
            async with await psycopg.AsyncConnection.connect(database_url) as later, later.transaction():
                await apply(later, CLAIM, [item])
            await apply(early, submit, [item])
            await early.commit()
            return await rec.tail_once()
        finally:
            await early.close()
            await pool.close()

    assert asyncio.run(scenario()) == 2
    with psycopg.connect(database_url) as conn:
        in_log = [r[0] for r in conn.execute("SELECT type FROM item_events WHERE item_id = %s ORDER BY xid, seq",
                                             (item,)).fetchall()]
    assert in_log == ["ItemSubmitted", "ItemClaimed"]  # the case itself: the log holds them the other way
    published = read_topic(kafka_config, topics[0], expect=2)
    assert [(m["value"]["type"], m["value"]["version"]) for m in published] == [
        ("ItemClaimed", 1), ("ItemSubmitted", 2)]


def test_a_transaction_open_in_another_database_holds_the_tail_back_and_the_wait_is_reported(
    database_url: str, kafka_config: dict[str, str], topics: tuple[str, str]
) -> None:
    """The horizon a tail reads below is the server's: a transaction that has written anything,
    in any database, holds every tail back while it is open. The leader reports how long the
    first event no tail can read has waited, and 0 once it is read."""
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario() -> tuple[int, float, int]:
        pool, rec = await _reconciler(database_url, kafka_config, topics)
        backlogs = PostgresBacklogs(pool)
        elsewhere = await psycopg.AsyncConnection.connect(with_db(database_url, "postgres"))
        try:
            await elsewhere.execute("SELECT pg_current_xact_id()")  # an id of its own, as a write takes
            async with await psycopg.AsyncConnection.connect(database_url) as conn, conn.transaction():
                await apply(conn, CLAIM, [item])
            while_open = await rec.tail_once()

            async def held_past_a_second() -> float | None:
                held = await backlogs.held_back_s()
                return held if held >= 1.0 else None

            async def nothing_held() -> bool:
                return await backlogs.held_back_s() == 0.0

            held = await eventually(held_past_a_second, 30, "the held-back event's wait reported past a second")
            await elsewhere.rollback()
            # No other transaction of this server's holds the horizon for long.
            await eventually(nothing_held, 30, "nothing held back once the other transaction ended")
            return while_open, held, await rec.tail_once()
        finally:
            await elsewhere.close()
            await pool.close()

    while_open, held, read = asyncio.run(scenario())
    assert while_open == 0, "the event of a committed transaction waits behind one open elsewhere on the server"
    assert held >= 1.0
    assert read == 1, "the tail reads the event once the other transaction has ended"


def test_each_outcome_carries_its_own_jobs_tenant_and_trace_batch_after_batch(
    database_url: str, kafka_config: dict[str, str], topics: tuple[str, str]
) -> None:
    """Two jobs of two tenants, their events interleaved in each batch: every outcome's headers
    name its own job's tenant and trace, in the first batch (read from the jobs) and in the
    next (known to the process by then), and a job without a trace gets no trace header."""
    traces = {"acme": f"00-{'a' * 32}-{'1' * 16}-01", "default": None}
    jobs: dict[str, str] = {}
    items: list[str] = []
    for tenant, guid in (("acme", "g-acme"), ("default", "g-default")):
        job_id, _, ids = seed_job(database_url, {guid: 2})
        jobs[job_id] = tenant
        items += ids
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme')")
        for job_id, tenant in jobs.items():
            conn.execute("UPDATE jobs SET tenant = %s, traceparent = %s WHERE job_id = %s",
                         (tenant, traces[tenant], job_id))
    first, second = [items[0], items[2]], [items[1], items[3]]  # one item of each job per batch

    async def scenario() -> list[int]:
        pool, rec = await _reconciler(database_url, kafka_config, topics)
        try:
            applied = []
            for batch in (first, second):
                async with pool.connection() as conn, conn.transaction():
                    await apply(conn, CLAIM, batch)
                applied.append(await rec.tail_once())
            return applied
        finally:
            await pool.close()

    assert asyncio.run(scenario()) == [2, 2]
    published = read_topic(kafka_config, topics[0], expect=4)
    got = sorted((m["value"]["item_id"], m["headers"]["pacer-tenant"], m["headers"].get("traceparent"))
                 for m in published)
    want = sorted((item, tenant.encode(), None if traces[tenant] is None else traces[tenant].encode())
                  for job_id, tenant in jobs.items() for item in _items_of(database_url, job_id))
    assert got == want


def _items_of(url: str, job_id: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT item_id::text FROM items WHERE job_id = %s", (job_id,))]


def test_projection_counts_and_completes_the_job(
    database_url: str, kafka_config: dict[str, str], topics: tuple[str, str]
) -> None:
    job_id, _shards, items = seed_job(database_url, {"g1": 2, "g2": 1})

    async def scenario() -> None:
        pool, rec = await _reconciler(database_url, kafka_config, topics)
        try:
            async with pool.connection() as conn, conn.transaction():
                moved = await apply(conn, CLAIM, items)
                for m in moved:
                    await apply(conn, Transition("ItemSubmitted", S.SUBMITTED, frozenset({S.CLAIMED}), epoch=m.lease_epoch), [m.item_id])
                    await apply(conn, Transition("ItemConfirmed", S.CONFIRMED, frozenset({S.SUBMITTED})), [m.item_id])
            assert await rec.tail_once() == 9
        finally:
            await pool.close()

    asyncio.run(scenario())
    with psycopg.connect(database_url) as conn:
        counts: dict[str, int] = dict(conn.execute(
            "SELECT status::text, sum(n) FROM shard_status_counts WHERE n <> 0 GROUP BY status").fetchall())
        job = conn.execute("SELECT status, finished_at IS NOT NULL FROM jobs WHERE job_id = %s", (job_id,)).fetchone()
        shard_states = {r[0] for r in conn.execute("SELECT status FROM shards WHERE job_id = %s", (job_id,))}
    assert counts == {"confirmed": 3}
    assert job == ("completed", True)
    assert shard_states == {"completed"}


def test_requeued_item_gets_a_new_command(
    database_url: str, kafka_config: dict[str, str], topics: tuple[str, str]
) -> None:
    _, _, (item,) = seed_job(database_url, {"g7": 1})

    async def scenario() -> dict[str, int]:
        pool, rec = await _reconciler(database_url, kafka_config, topics)
        try:
            async with pool.connection() as conn, conn.transaction():
                await apply(conn, Transition("ItemClaimed", S.CLAIMED, frozenset({S.PENDING}), lease_owner="dead",
                                             lease_ttl=timedelta(0)), [item])
            report = await rec.sweep_once()
            await rec.tail_once()
            return report.moved
        finally:
            await pool.close()

    moved = asyncio.run(scenario())
    assert moved["claim_expired"] == 1
    commands = read_topic(kafka_config, topics[1], expect=1)
    assert [(c["key"], c["value"]["item_id"]) for c in commands] == [(b"g7", item)]


def test_events_are_read_in_transaction_id_order_across_a_digit_boundary(
    database_url: str, kafka_config: dict[str, str], topics: tuple[str, str]
) -> None:
    """Transaction ids 9, 10, 11 are read in that order, one batch at a time: none is read
    twice or passed over where its id gains a digit (as text, '10' sorts before '9')."""
    _, _, items = seed_job(database_url, {"g1": 3})
    with psycopg.connect(database_url) as conn:
        for xid, item in zip((9, 10, 11), items, strict=True):
            conn.execute(
                "INSERT INTO item_events (xid, item_id, job_id, shard_id, guid, version, type, from_status, to_status)"
                " SELECT %s::text::xid8, item_id, job_id, shard_id, guid, 1, 'ItemClaimed', 'pending', 'claimed'"
                " FROM items WHERE item_id = %s", (xid, item))

    async def scenario() -> list[int]:
        pool, rec = await _reconciler(database_url, kafka_config, topics)
        rec.batch = 1
        try:
            return [await rec.tail_once() for _ in range(4)]
        finally:
            await pool.close()

    assert asyncio.run(scenario()) == [1, 1, 1, 0]
    published = read_topic(kafka_config, topics[0], expect=3)
    assert [m["value"]["item_id"] for m in published] == items
    with psycopg.connect(database_url) as conn:
        counts: dict[str, int] = dict(conn.execute(
            "SELECT status::text, sum(n) FROM shard_status_counts WHERE n <> 0 GROUP BY status").fetchall())
    assert counts == {"claimed": 3}


def test_a_rebuilt_projection_matches_the_items_and_the_tail_goes_on_from_the_end(
    database_url: str, kafka_config: dict[str, str], topics: tuple[str, str], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`pacer rebuild-projection` recounts shard progress from the items table (here after
    counts went wrong), completes what is done and moves the cursor past every event."""
    from pacer_common.cli import main as cli

    job_id, shards, items = seed_job(database_url, {"g1": 2, "g2": 1})

    async def scenario(n_events: int) -> int:
        pool, rec = await _reconciler(database_url, kafka_config, topics)
        try:
            async with pool.connection() as conn, conn.transaction():
                for m in await apply(conn, CLAIM, items[:n_events]):
                    await apply(conn, Transition("ItemSubmitted", S.SUBMITTED, frozenset({S.CLAIMED}),
                                                 epoch=m.lease_epoch), [m.item_id])
                    await apply(conn, Transition("ItemConfirmed", S.CONFIRMED, frozenset({S.SUBMITTED})), [m.item_id])
            return await rec.tail_once()
        finally:
            await pool.close()

    assert asyncio.run(scenario(3)) == 9  # every item confirmed and projected
    with psycopg.connect(database_url) as conn:  # then counts and cursor go wrong
        conn.execute("UPDATE shard_status_counts SET n = n + 7 WHERE shard_id = %s", (shards["g1"],))
        conn.execute("UPDATE jobs SET status = 'running', finished_at = NULL WHERE job_id = %s", (job_id,))
        conn.execute("UPDATE log_cursors SET last_xid = '0', last_seq = 0 WHERE name = 'reconciler'")
    monkeypatch.setenv("PACER_DATABASE_URL", database_url)
    with pytest.raises(SystemExit) as refused:
        cli(["rebuild-projection"])
    assert refused.value.code == 3, "refused without the confirmation that services are stopped"
    assert "stop the planner, the senders, the reconcilers and the Control API first" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        cli(["rebuild-projection", "--services-stopped"])
    assert done.value.code == 0
    with psycopg.connect(database_url) as conn:
        counts: dict[str, int] = dict(conn.execute(
            "SELECT status::text, sum(n) FROM shard_status_counts WHERE n <> 0 GROUP BY status").fetchall())
        job = conn.execute("SELECT status FROM jobs WHERE job_id = %s", (job_id,)).fetchone()[0]
    assert counts == {"confirmed": 3}
    assert job == "completed"
    assert asyncio.run(scenario(0)) == 0, "no event is applied again after the rebuild"
    with psycopg.connect(database_url) as conn:
        again: dict[str, int] = dict(conn.execute(
            "SELECT status::text, sum(n) FROM shard_status_counts WHERE n <> 0 GROUP BY status").fetchall())
    assert again == {"confirmed": 3}


def test_an_unreadable_event_and_an_oversized_command_are_skipped_and_the_rest_goes_through(
    database_url: str, kafka_config: dict[str, str], topics: tuple[str, str]
) -> None:
    _, _, (odd, big, fine) = seed_job(database_url, {"g1": 3})
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE items SET content = repeat('x', 5000) WHERE item_id = %s", (big,))
        # an event type from a newer version of Pacer
        conn.execute(
            "INSERT INTO item_events (item_id, job_id, shard_id, guid, version, type, from_status, to_status)"
            " SELECT item_id, job_id, shard_id, guid, 1, 'ItemTeleported', 'pending', 'pending'"
            " FROM items WHERE item_id = %s", (odd,))

    async def scenario() -> tuple[int, dict[str, int]]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        store = PostgresLog(pool, "reconciler", timedelta(seconds=60))
        pub = KafkaPublisher(make_producer(kafka_config), topics[0], lambda lane: topics[1], max_message_bytes=4000)
        rec = Reconciler(store, store, pub)
        try:
            async with pool.connection() as conn, conn.transaction():
                for item in (big, fine):  # both back to pending: each needs a command again
                    await apply(conn, Transition("ItemClaimed", S.CLAIMED, frozenset({S.PENDING}),
                                                 lease_owner="dead", lease_ttl=timedelta(0)), [item])
            await rec.sweep_once()
            n = 0
            while (k := await rec.tail_once()):
                n += k
            return n, dict(rec.bad)
        finally:
            await pool.close()

    rows, bad = asyncio.run(scenario())
    assert rows == 5, "1 unreadable + 2 claims + 2 lease expiries: every row passed"
    assert bad == {"unreadable_event": 1, "unpublishable": 1}
    commands = read_topic(kafka_config, topics[1], expect=1)
    assert [c["value"]["item_id"] for c in commands] == [fine]
    outcomes = read_topic(kafka_config, topics[0], expect=4)
    assert sorted(o["value"]["type"] for o in outcomes) == ["ItemClaimed"] * 2 + ["ItemLeaseExpired"] * 2


def test_while_kafka_is_away_a_publish_waits_without_holding_the_event_loop() -> None:
    """The broker is down (nothing listens at its address): a publish waits for its
    acknowledgements, up to its timeout, and fails; the event loop runs on meanwhile, as it
    must to renew the segment leases and answer /healthz."""
    from datetime import UTC, datetime

    from pacer_common.domain.events import ItemEvent
    from pacer_common.kafka import ProduceError
    from pacer_dev.fakegateway.process import free_port

    event = ItemEvent(seq=1, type="ItemConfirmed", item_id="i1", job_id="j", shard_id=1, guid="g", version=3,
                      from_status=S.SUBMITTED, to_status=S.CONFIRMED, occurred_at=datetime.now(UTC), payload={})
    producer = make_producer({"bootstrap.servers": f"127.0.0.1:{free_port()}"})
    pub = KafkaPublisher(producer, "outcomes", lambda lane: f"commands.{lane}", timeout_s=2.0)

    async def scenario() -> tuple[list[float], float, BaseException | None]:
        loop = asyncio.get_running_loop()
        ran_at: list[float] = []
        start = loop.time()
        loop.call_later(0.5, lambda: ran_at.append(loop.time() - start))  # due half a second into the wait
        try:
            await pub.publish([event], [])
            return ran_at, loop.time() - start, None
        except ProduceError as exc:
            return ran_at, loop.time() - start, exc

    ran_at, waited, error = asyncio.run(scenario())
    assert isinstance(error, ProduceError), "nothing can acknowledge: the publish must fail, not pass"
    assert waited >= 1.9, f"the publish gave up after {waited:.2f} s, not its 2 s timeout"
    assert ran_at and ran_at[0] < 1.0, f"a callback due at 0.5 s ran at {ran_at} during a {waited:.2f} s wait: the loop was held"


def test_a_producer_that_stalls_is_replaced_and_the_batch_goes_out_once_through_the_new_one(
    database_url: str, kafka_config: dict[str, str], topics: tuple[str, str]
) -> None:
    """A producer that no longer reaches Kafka (here: it was made for an address nothing
    listens at) acknowledges nothing: the round fails once the stall is seen, well before the
    publish timeout, and the batch stays unprojected. The publisher then holds a new producer
    to the live broker, and the next round publishes the batch and projects it."""
    from pacer_common.kafka import ProduceStalled
    from pacer_dev.fakegateway.process import free_port

    _, shards, (item,) = seed_job(database_url, {"g1": 1})
    wedged = make_producer({"bootstrap.servers": f"127.0.0.1:{free_port()}"})
    pub = KafkaPublisher(wedged, topics[0], lambda lane: topics[1], timeout_s=60.0,
                         renew=lambda: make_producer(kafka_config), stall_s=5.0)

    async def scenario() -> tuple[BaseException | None, float, int, int]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        try:
            store = PostgresLog(pool, "reconciler", timedelta(seconds=60))
            rec = Reconciler(store, store, pub)
            async with pool.connection() as conn, conn.transaction():
                await apply(conn, CLAIM, [item])
            loop = asyncio.get_running_loop()
            start, error = loop.time(), None
            try:
                await rec.tail_once()
            except ProduceStalled as exc:
                error = exc
            waited = loop.time() - start
            rec.forget_position()
            pub.stall_s = 60.0  # the new producer's first report may take its start-up on a busy broker
            return error, waited, await rec.tail_once(), await rec.tail_once()
        finally:
            await pool.close()

    error, waited, second, third = asyncio.run(scenario())
    assert isinstance(error, ProduceStalled), f"the stalled producer's round must fail as stalled, not {error!r}"
    assert waited < 30, f"the stall was seen after {waited:.1f} s, not about its 5 s"
    assert pub.producer is not wedged and pub.client.renewals == 1
    assert (second, third) == (1, 0), "the batch must be published and projected by the next round, once"
    published = read_topic(kafka_config, topics[0], expect=1)
    assert [m["value"]["item_id"] for m in published] == [item]
    with psycopg.connect(database_url) as conn:
        n = conn.execute("SELECT coalesce(sum(n), 0) FROM shard_status_counts WHERE shard_id = %s"
                         " AND status = 'claimed'", (shards["g1"],)).fetchone()[0]
    assert n == 1, "the claim must be projected once"


def test_a_quiet_segment_s_cursor_never_moves_past_an_event_of_its_own_not_yet_read(database_url: str) -> None:
    """The move past finished transactions (when a read found nothing) is refused while any
    event of the segment lies between the cursor and the horizon: an event that committed after
    the read would otherwise be passed over."""
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario() -> tuple[object, object]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        try:
            store = PostgresLog(pool, "reconciler", timedelta(seconds=60))
            start = await store.position()
            async with await psycopg.AsyncConnection.connect(database_url) as conn, conn.transaction():
                await apply(conn, CLAIM, [item])  # committed after a read that found nothing
            unread = await store.quiet_position(start)
            (applied,) = await store.read(start, 10)
            async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
                await conn.execute("SELECT pg_current_xact_id()")  # a later transaction, with no event
            return unread, await store.quiet_position(applied[0])
        finally:
            await pool.close()

    unread, after = asyncio.run(scenario())
    assert unread is None, f"moved past an unread event to {unread}"
    assert after is not None, "once the event is read, the cursor may move past the finished transactions"


def test_the_open_jobs_with_most_items_left_come_first_with_their_final_items_as_the_tail_counted_them(
    database_url: str, kafka_config: dict[str, str], topics: tuple[str, str]
) -> None:
    big, _, big_items = seed_job(database_url, {"g1": 3, "g2": 3})
    small, _, small_items = seed_job(database_url, {"g3": 2})
    paused, _, _ = seed_job(database_url, {"g4": 1})
    finished, _, _ = seed_job(database_url, {"g5": 9})  # most items, but not open
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE jobs SET status = 'paused' WHERE job_id = %s", (paused,))
        conn.execute("UPDATE jobs SET status = 'completed' WHERE job_id = %s", (finished,))

    async def scenario() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        pool, rec = await _reconciler(database_url, kafka_config, topics)
        try:
            async with pool.connection() as conn, conn.transaction():
                await apply(conn, Transition("ItemExpired", S.EXPIRED, frozenset({S.PENDING})), big_items[:2])
                await apply(conn, CLAIM, big_items[2:4] + small_items[:1])  # claimed: not final
                await apply(conn, Transition("ItemCancelled", S.ABANDONED, frozenset({S.PENDING})), small_items[1:])
            await eventually(lambda: rec.tail_once(), 30, "the events projected")  # counts follow the tail
            backlogs = PostgresBacklogs(pool)
            return await backlogs.jobs(10), await backlogs.jobs(2)
        finally:
            await pool.close()

    every, top = asyncio.run(scenario())
    assert [(r["job_id"], r["status"], r["done"], r["items"]) for r in every] == [
        (big, "running", 2, 6), (small, "running", 1, 2), (paused, "paused", 0, 1)]
    assert [r["job_id"] for r in top] == [big, small]
    assert {(r["kind"], r["tenant"]) for r in every} == {("campaign", "default")}
