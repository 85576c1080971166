"""Job request → planner → senders → reconciler, as separate processes on real Kafka/Postgres."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from pacer_common.kafka import make_producer, produce_all
from pacer_dev.stack import Stack
from tests.e2e.conftest import gateway
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.e2e


def request(items: int, guids: int, request_id: str | None = None) -> dict[str, object]:
    rid = request_id or f"e2e-{uuid.uuid4().hex[:10]}"
    return {
        "request_id": rid, "kind": "campaign", "created_by": "test", "content_version": 1,
        "message": {"type": "text", "content": "Hi {n} ({rid})"},
        "targets": {"mode": "snapshot", "items": [
            {"guid": f"{rid}-g{i % guids}", "to_id": f"room-{i}", "vars": {"n": str(i), "rid": rid}} for i in range(items)
        ]},
        "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
    }


def publish(stack: Stack, *values: bytes, key: bytes | None = None) -> None:
    topic = f"{stack.topic_prefix}.job-requests"
    produce_all(make_producer({"bootstrap.servers": stack.infra.kafka_bootstrap}),
                [(topic, key, v, None) for v in values])


def job_state(stack: Stack, request_id: str) -> tuple[str, dict[str, int]] | None:
    with psycopg.connect(stack.infra.database_url) as conn:
        job = conn.execute("SELECT job_id, status FROM jobs WHERE request_id = %s", (request_id,)).fetchone()
        if job is None:
            return None
        rows = conn.execute("SELECT status::text, count(*) FROM items WHERE job_id = %s GROUP BY 1", (job[0],)).fetchall()
    return job[1], dict(rows)


def projected_counts(stack: Stack, request_id: str) -> dict[str, int]:
    with psycopg.connect(stack.infra.database_url) as conn:
        rows = conn.execute(
            "SELECT c.status::text, sum(c.n)::int FROM shard_status_counts c JOIN shards s USING (shard_id)"
            " JOIN jobs j USING (job_id) WHERE j.request_id = %s GROUP BY 1 HAVING sum(c.n) <> 0", (request_id,)).fetchall()
    return dict(rows)


def sends_for(stack: Stack, prefix: str) -> list[dict]:
    out, offset = [], 0
    while True:
        page = gateway(stack, f"/_admin/sends?limit=1000&offset={offset}")
        sends = page["sends"] if isinstance(page, dict) else page
        if not sends:
            return [s for s in out if s["guid"].startswith(prefix)]
        out.extend(sends)
        offset += len(sends)


def test_thousand_items_over_twenty_guids_are_each_delivered_exactly_once(stack: Stack) -> None:
    req = request(1000, 20)
    rid = str(req["request_id"])
    publish(stack, json.dumps(req).encode(), key=rid.encode())
    state = wait_for(lambda: (s := job_state(stack, rid)) and s[0] == "completed" and s, 180, "job completion")
    assert state[1] == {"confirmed": 1000}
    assert projected_counts(stack, rid) == {"confirmed": 1000}, "the reconciler's projection matches the items"
    sends = sends_for(stack, rid)
    keys = [s["idempotencyKey"] for s in sends]
    assert len(sends) == 1000 and len(set(keys)) == 1000, "each item delivered exactly once"
    stats = gateway(stack, "/_admin/stats")
    assert stats["interval_violations"] == 0
    assert stats["max_concurrency_per_guid"] <= 1


def test_the_same_request_published_twice_makes_one_job(stack: Stack) -> None:
    req = request(50, 5)
    rid = str(req["request_id"])
    body = json.dumps(req).encode()
    publish(stack, body, body, key=rid.encode())
    wait_for(lambda: (s := job_state(stack, rid)) and s[0] == "completed", 120, "job completion")
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
        rid = str(good["request_id"])
        wait_for(lambda rid=rid: (s := job_state(stack, rid)) and s[0] == "completed", 120, f"job {rid}")
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
    campaign["targets"]["items"] = [  # type: ignore[index]
        {"guid": guid, "to_id": f"room-{i}", "vars": {"n": str(i), "rid": "c"}} for i in range(300)]
    publish(stack, json.dumps(campaign).encode())
    wait_for(lambda: len(sends_for(stack, guid)) >= 3, 60, "the campaign to start")
    reply = {"request_id": f"reply-{uuid.uuid4().hex[:8]}", "kind": "auto_reply", "created_by": "bot",
             "source_msg_uid": "m-1", "message": {"type": "text", "content": "We are on it"},
             "targets": {"mode": "snapshot", "items": [{"guid": guid, "to_id": "customer-1"}]}}
    before = len(sends_for(stack, guid))
    publish(stack, json.dumps(reply).encode())
    sends = wait_for(lambda: (s := sends_for(stack, guid)) and any(x["toId"] == "customer-1" for x in s) and s,
                     60, "the auto-reply")
    position = next(i for i, x in enumerate(sends) if x["toId"] == "customer-1")
    assert position - before <= 3, f"the reply waited behind {position - before} campaign sends"
    assert len(sends) < 300, "the campaign was still running: the reply did not just come last"
