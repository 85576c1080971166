"""Job request → planner → senders → reconciler, as separate processes on real Kafka/Postgres."""

from __future__ import annotations

import json
import uuid
import zlib
from datetime import UTC, datetime

import psycopg
import pytest

from pacer_dev.stack import Stack
from tests.e2e.conftest import gateway
from tests.e2e.helpers import job_state, publish, request, sends_for
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.e2e








def projected_counts(stack: Stack, request_id: str) -> dict[str, int]:
    with psycopg.connect(stack.infra.database_url) as conn:
        rows = conn.execute(
            "SELECT c.status::text, sum(c.n)::int FROM shard_status_counts c JOIN shards s USING (shard_id)"
            " JOIN jobs j USING (job_id) WHERE j.request_id = %s GROUP BY 1 HAVING sum(c.n) <> 0", (request_id,)).fetchall()
    return dict(rows)


def wait_completed(stack: Stack, request_id: str, timeout_s: float) -> tuple[str, dict[str, int]]:
    """Wait for the job of ``request_id`` to complete; on timeout, say where every open item stands."""
    try:
        return wait_for(lambda: (s := job_state(stack, request_id)) and s[0] == "completed" and s, timeout_s,
                        f"job {request_id} completion")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {_job_diagnosis(stack, request_id)}") from None




def test_thousand_items_over_twenty_guids_are_each_delivered_exactly_once(stack: Stack) -> None:
    req = request(1000, 20)
    rid = str(req["request_id"])
    publish(stack, json.dumps(req).encode(), key=rid.encode())
    state = wait_completed(stack, rid, 180)
    assert state[1] == {"confirmed": 1000}
    assert projected_counts(stack, rid) == {"confirmed": 1000}, "the reconciler's projection matches the items"
    sends = sends_for(stack, rid)
    keys = [s["idempotencyKey"] for s in sends]
    assert len(sends) == 1000 and len(set(keys)) == 1000, "each item delivered exactly once"
    stats = gateway(stack, "/_admin/stats")
    assert stats["interval_violations"] == 0
    assert stats["max_concurrency_per_guid"] <= 1
    # the sender holding these guids published its own limits (PACER_SENDER_MIN_INTERVAL_MS=10),
    # by which the stall count and the Control API read them
    with psycopg.connect(stack.infra.database_url) as conn:
        held_by = conn.execute("SELECT DISTINCT s.limits ->> 'min_interval_s' FROM guid_leases l"
                               " JOIN sender_limits s ON s.owner = l.owner WHERE l.guid = ANY(%s)",
                               ([f"{rid}-g{n}" for n in range(20)],)).fetchall()
    assert held_by == [("0.01",)]


def test_the_same_request_published_twice_makes_one_job(stack: Stack) -> None:
    req = request(50, 5)
    rid = str(req["request_id"])
    body = json.dumps(req).encode()
    publish(stack, body, body, key=rid.encode())
    wait_completed(stack, rid, 120)
    with psycopg.connect(stack.infra.database_url) as conn:
        (jobs,) = conn.execute("SELECT count(*) FROM jobs WHERE request_id = %s", (rid,)).fetchone()
    assert jobs == 1
    assert len(sends_for(stack, rid)) == 50


def test_malformed_requests_go_to_the_dlq_with_a_reason_while_valid_ones_flow(stack: Stack) -> None:
    good1, good2 = request(20, 2), request(20, 2)
    missing = request(5, 1)
    del missing["created_by"]
    not_json = b"{this is not json"
    publish(stack, not_json, json.dumps(good1).encode(), json.dumps(missing).encode(), json.dumps(good2).encode())
    for good in (good1, good2):
        wait_completed(stack, str(good["request_id"]), 120)
    dlq = {m["raw"]: m["headers"]["pacer-error-reason"].decode() for m in _read_raw_dlq(stack)}
    assert set(dlq) == {not_json, json.dumps(missing).encode()}, "original bytes, untouched"
    assert dlq[not_json].startswith("invalid job request: (request): Invalid JSON")
    assert "created_by: Field required" in dlq[json.dumps(missing).encode()]


def _read_raw_dlq(stack: Stack) -> list[dict]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": stack.infra.kafka_bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([f"{stack.topic_prefix}.job-requests.dlq"])
    out: list[dict] = []

    def poll() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            out.append({"raw": msg.value(), "headers": dict(msg.headers() or [])})
        return len(out) >= 2

    try:
        wait_for(poll, 30, "two dead-lettered requests")
    finally:
        consumer.close()
    return out


def test_an_auto_reply_overtakes_a_campaign_backlog_on_its_guid(stack: Stack) -> None:
    guid = f"busy-{uuid.uuid4().hex[:6]}"
    with psycopg.connect(stack.infra.database_url) as conn:  # hot-adjust this guid: slow pacing
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 'test')",
                     (guid, json.dumps({"min_interval_s": 0.25, "jitter_s": 0.0, "online_reserve": 0.2})))
    campaign = request(300, 1)
    campaign["targets"]["items"] = [
        {"guid": guid, "to_id": f"room-{i}", "vars": {"n": str(i), "rid": "c"}} for i in range(300)]
    publish(stack, json.dumps(campaign).encode())
    wait_for(lambda: len(sends_for(stack, guid)) >= 3, 60, "the campaign to start")
    reply = {"request_id": f"reply-{uuid.uuid4().hex[:8]}", "kind": "auto_reply", "created_by": "bot",
             "source_msg_uid": "m-1", "message": {"type": "text", "content": "We are on it"},
             "targets": {"mode": "snapshot", "items": [{"guid": guid, "to_id": "customer-1"}]}}
    publish(stack, json.dumps(reply).encode())
    sends = wait_for(lambda: (s := sends_for(stack, guid)) and any(x["toId"] == "customer-1" for x in s) and s,
                     60, "the auto-reply")
    position = next(i for i, x in enumerate(sends) if x["toId"] == "customer-1")
    # Count from the moment the reply was queued (its row in Postgres), so what is measured is
    # the sender's order, not how long intake took on a busy machine.
    with psycopg.connect(stack.infra.database_url) as conn:
        (queued_at,) = conn.execute("SELECT extract(epoch FROM i.created_at)::float8 FROM items i JOIN jobs j "
                                    "USING (job_id) WHERE j.request_id = %s", (reply["request_id"],)).fetchone()
    before = sum(1 for x in sends if x["at"] < queued_at)
    # The rest of the campaign (a minute and a half at this pace) would otherwise run on
    # under the next tests, its backlog filling its partition's share of the sender buffer.
    with psycopg.connect(stack.infra.database_url) as conn:
        (job,) = conn.execute("SELECT job_id FROM jobs WHERE request_id = %s", (campaign["request_id"],)).fetchone()
        conn.execute("SELECT pacer_job_action(%s, 'cancel', 'test', 'e2e: done with it')", (job,))
    assert position - before <= 3, f"the reply waited behind {position - before} campaign sends"
    assert len(sends) < 300, "the campaign was still running: the reply did not just come last"


def _partitions(stack: Stack, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": stack.infra.kafka_bootstrap}).list_topics(topic, timeout=10)
    return len(meta.topics[topic].partitions)


def test_a_guid_backlog_does_not_hold_up_another_guid_of_its_partition(stack: Stack) -> None:
    """A campaign of 400 items on one slow guid (100 s of work) must not keep a guid that
    shares its Kafka partition waiting: the backlog past a guid's in-memory window stays in
    Postgres, so the partition is still read and the other guid's job finishes within seconds."""
    busy = f"hol-{uuid.uuid4().hex[:6]}"
    n = _partitions(stack, f"{stack.topic_prefix}.item-commands.batch")
    # librdkafka's default partitioner for keyed messages: CRC32 of the key
    other = next(g for g in (f"hol-{uuid.uuid4().hex[:6]}" for _ in range(10_000))
                 if zlib.crc32(g.encode()) % n == zlib.crc32(busy.encode()) % n)
    with psycopg.connect(stack.infra.database_url) as conn:
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 'test')",
                     (busy, json.dumps({"min_interval_s": 0.25, "jitter_s": 0.0})))
    campaign = request(400, 1)
    campaign["targets"]["items"] = [
        {"guid": busy, "to_id": f"room-{i}", "vars": {"n": str(i), "rid": "c"}} for i in range(400)]
    publish(stack, json.dumps(campaign).encode())
    wait_for(lambda: len(sends_for(stack, busy)) >= 3, 60, "the campaign to start")
    small = request(5, 1)
    small["targets"]["items"] = [
        {"guid": other, "to_id": f"room-{i}", "vars": {"n": str(i), "rid": "s"}} for i in range(5)]
    try:
        publish(stack, json.dumps(small).encode())
        wait_completed(stack, str(small["request_id"]), 30)
        assert len(sends_for(stack, busy)) < 200, "the campaign had not worked its backlog off"
    finally:
        with psycopg.connect(stack.infra.database_url) as conn:
            (job,) = conn.execute("SELECT job_id FROM jobs WHERE request_id = %s",
                                  (campaign["request_id"],)).fetchone()
            conn.execute("SELECT pacer_job_action(%s, 'cancel', 'test', 'e2e: done with it')", (job,))


def test_pending_items_whose_commands_were_never_produced_are_still_sent(stack: Stack) -> None:
    """Postgres is the record of the queue: items stored by the planner's own store whose
    commands never reach Kafka (deleted by retention, lost, skipped by an offset reset) are
    found by the senders' sweep and delivered, each exactly once."""
    import asyncio

    from pacer_common.db.pool import open_pool
    from pacer_common.domain.requests import JobRequest
    from pacer_planner.adapters.postgres import PostgresJobStore
    from pacer_planner.domain.planning import plan

    req = request(30, 3)
    rid = str(req["request_id"])

    async def store_without_commands() -> None:
        pool = await open_pool(stack.infra.database_url, min_size=1, max_size=2)
        try:
            store = PostgresJobStore(pool)
            p = plan(JobRequest.model_validate(req), datetime.now(UTC))
            await store.store(p)
            await store.mark_dispatched(p.job_id)  # as if its commands had been produced
        finally:
            await pool.close()

    asyncio.run(store_without_commands())
    state = wait_completed(stack, rid, 60)
    assert state[1] == {"confirmed": 30}
    keys = [s["idempotencyKey"] for s in sends_for(stack, rid)]
    assert len(keys) == 30 and len(set(keys)) == 30, "each item delivered exactly once"


def test_a_paused_job_stops_within_a_second_and_resumes_to_exactly_once(stack: Stack) -> None:
    """Pause mid-run: after the pause commits, no item is claimed later than one second on
    (at an item boundary of every sender); resume releases the held items and every item
    is delivered exactly once."""
    req = request(240, 4)
    rid = str(req["request_id"])
    db = stack.infra.database_url
    with psycopg.connect(db) as conn:  # slow these guids down so the job runs for a while
        for i in range(4):
            conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 'test')",
                         (f"{rid}-g{i}", json.dumps({"min_interval_s": 0.1, "jitter_s": 0.02})))
    publish(stack, json.dumps(req).encode(), key=rid.encode())

    def confirmed() -> int:
        return (job_state(stack, rid) or ("", {}))[1].get("confirmed", 0)

    wait_for(lambda: confirmed() >= 20, 60, "the job under way")
    with psycopg.connect(db) as conn:
        (job,) = conn.execute("SELECT job_id FROM jobs WHERE request_id = %s", (rid,)).fetchone()
        outcome = conn.execute("SELECT outcome FROM pacer_job_action(%s, 'pause', 'test', 'e2e')", (job,)).fetchone()[0]
        (paused_at,) = conn.execute("SELECT paused_at FROM jobs WHERE job_id = %s", (job,)).fetchone()
    assert outcome == "done"

    def settled_on_hold() -> list[str]:
        """Held items once nothing of the job is in flight or still claimable: every sender has
        met the hold (or its guid had nothing left)."""
        with psycopg.connect(db) as conn:
            open_, held = conn.execute(
                "SELECT count(*) FILTER (WHERE status IN ('claimed', 'submitted') OR (status = 'pending' AND NOT held)),"
                " array_agg(item_id::text) FILTER (WHERE held AND status = 'pending') FROM items WHERE job_id = %s",
                (job,)).fetchone()
        return held if open_ == 0 and held else []

    held = wait_for(settled_on_hold, 60, "every sender meeting the hold")
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT outcome FROM pacer_job_action(%s, 'resume', 'test')", (job,)).fetchone()[0] == "done"
        late_claims = conn.execute(
            "SELECT count(*) FROM item_events e JOIN audit_log a ON a.target_id = e.job_id::text"
            " WHERE e.job_id = %s AND e.type = 'ItemClaimed' AND a.action = 'resume'"
            "   AND e.occurred_at > %s + interval '1 second' AND e.occurred_at < a.at", (job, paused_at)).fetchone()[0]
    assert late_claims == 0, "an item was claimed more than a second after the pause"
    state = wait_completed(stack, rid, 120)
    assert state[1] == {"confirmed": 240}, _open_items(db, job)
    keys = [s["idempotencyKey"] for s in sends_for(stack, rid)]
    assert len(keys) == 240 and len(set(keys)) == 240, "each item delivered exactly once"
    # Each held item went out after the resume: released by the reconciler's sweep (then
    # published again), or claimed straight from a command a sender still had (a partition
    # that moved between the two senders hands its unconsumed commands on), whichever came
    # first; the hold is lifted either way.
    with psycopg.connect(db) as conn:
        unreleased = conn.execute(
            "SELECT count(*) FROM unnest(%s::uuid[]) AS h(item_id) WHERE NOT EXISTS ("
            "  SELECT 1 FROM item_events e JOIN audit_log a ON a.target_id = e.job_id::text AND a.action = 'resume'"
            "  WHERE e.job_id = %s AND e.item_id = h.item_id AND e.occurred_at >= a.at"
            "    AND e.type IN ('ItemReleased', 'ItemClaimed'))", (held, job)).fetchone()[0]
    assert unreleased == 0, f"{unreleased} of the {len(held)} held items went out with no release or claim after the resume"


def _open_items(db: str, job: str) -> str:
    """What is left of a job, for a failure message: items, their events, the audit log."""
    with psycopg.connect(db) as conn:
        items = conn.execute("SELECT item_id, status::text, held, shard_id FROM items WHERE job_id = %s"
                             " AND status <> 'confirmed'", (job,)).fetchall()
        events = conn.execute("SELECT item_id, version, type, from_status::text, to_status::text FROM item_events"
                              " WHERE item_id = ANY(%s) ORDER BY item_id, version", ([i[0] for i in items],)).fetchall()
        audit = conn.execute("SELECT at, actor, action, before, after FROM audit_log WHERE target_id = %s ORDER BY id",
                             (str(job),)).fetchall()
    return f"open items {items}; their events {events}; audit {audit}"


def _job_diagnosis(stack: Stack, request_id: str) -> str:
    with psycopg.connect(stack.infra.database_url) as conn:
        row = conn.execute("SELECT job_id, status FROM jobs WHERE request_id = %s", (request_id,)).fetchone()
        if row is None:
            return "no such job"
        leases = conn.execute("SELECT guid, owner, lease_until > now(), paused_reason FROM guid_leases"
                              " WHERE guid IN (SELECT guid FROM items WHERE job_id = %s)", (row[0],)).fetchall()
        shards = conn.execute("SELECT shard_id, status FROM shards WHERE job_id = %s", (row[0],)).fetchall()
    return (f"job {row[1]}; shards {shards}; projected counts {projected_counts(stack, request_id)}; leases {leases};"
            f" {_open_items(stack.infra.database_url, row[0])}")


def test_a_guid_the_gateway_rate_limits_is_slowed_and_no_item_fails_or_pays_for_it(stack: Stack) -> None:
    """The gateway accepts this guid at most every 250 ms while Pacer's limit says 10 ms: it
    answers "too fast" (45009) until the guid has slowed down. Every item is still delivered
    once, none failed, none used more than the one attempt that went through, and the job's
    budget of exactly one send per item was enough."""
    req = request(12, 1) | {"budget": {"max_sends": 12}}
    rid = str(req["request_id"])
    guid = f"{rid}-g0"
    knobs = gateway(stack, "/_admin/config")
    gateway(stack, "/_admin/config", "PUT", {"guid_min_interval_ms": {**knobs["guid_min_interval_ms"], guid: 250}})
    publish(stack, json.dumps(req).encode(), key=rid.encode())
    state = wait_completed(stack, rid, 180)
    assert state[1] == {"confirmed": 12}
    keys = [s["idempotencyKey"] for s in sends_for(stack, rid)]
    assert len(keys) == 12 == len(set(keys)), "each item delivered exactly once"
    with psycopg.connect(stack.infra.database_url) as conn:
        deferrals, attempts, used = conn.execute(
            "SELECT (SELECT count(*) FROM item_events e WHERE e.job_id = j.job_id AND e.type = 'ItemRetryScheduled'"
            "        AND e.payload ->> 'error_class' = 'rate_limited'),"
            "       (SELECT max(i.attempts) FROM items i WHERE i.job_id = j.job_id), j.budget_used"
            " FROM jobs j WHERE j.request_id = %s", (rid,)).fetchone()
    assert deferrals > 0, "the gateway did rate-limit the guid"
    assert (attempts, used) == (1, 12)

    def penalty() -> float | None:
        with psycopg.connect(stack.infra.database_url) as conn:
            row = conn.execute("SELECT penalty FROM guid_leases WHERE guid = %s", (guid,)).fetchone()
        return None if row is None else row[0]

    # 10 ms was doubled until sends were 250 ms apart, and twelve clean sends bring it back by
    # at most 0.9 ** 12: the penalty is still well above 1 when the sender writes it, with its
    # next lease renewal, for the next owner and the pages to read.
    wait_for(lambda: (penalty() or 0) > 4, 30, "the guid's rate-limit penalty on its lease row", penalty)
