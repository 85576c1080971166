"""Job requests name a tenant: the job records it, its guids become the tenant's, and a request
the tenants refuse (unknown tenant, another tenant's guid, over max_guids) is dead-lettered."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from pacer_common.db.pool import open_pool
from pacer_common.kafka import ensure_topics, make_producer
from pacer_planner.adapters.kafka import KafkaCommandBus
from pacer_planner.adapters.postgres import PostgresJobStore
from pacer_planner.core import Handled, Planner
from tests.integration.helpers import read_topic


def request(rid: str, guids: list[str], tenant: str | None = None) -> bytes:
    body: dict[str, object] = {
        "request_id": rid, "kind": "campaign", "created_by": "t", "message": {"type": "text", "content": "hi"},
        "targets": {"items": [{"guid": g, "to_id": f"to-{g}"} for g in guids]},
        "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}
    if tenant is not None:
        body["tenant"] = tenant
    return json.dumps(body).encode()


@pytest.fixture
def topics(kafka_config: dict[str, str], topic_prefix: str) -> dict[str, str]:
    t = {lane: f"{topic_prefix}.item-commands.{lane}" for lane in ("online", "batch")} | {
        "dlq": f"{topic_prefix}.job-requests.dlq"}
    ensure_topics(kafka_config, {name: (1, {}) for name in t.values()})
    return t


def run(url: str, kafka_config: dict[str, str], topics: dict[str, str], bodies: list[bytes]) -> list[Handled]:
    async def go() -> list[Handled]:
        pool = await open_pool(url, min_size=1, max_size=2)
        bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: topics[lane], topics["dlq"])
        planner = Planner(PostgresJobStore(pool), bus)
        try:
            return [await planner.handle(None, b) for b in bodies]
        finally:
            await pool.close()

    return asyncio.run(go())


def test_jobs_record_their_tenant_and_claim_its_guids(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, base_url) VALUES ('acme', 'http://acme')")
    hs = run(database_url, kafka_config, topics, [request("t1", ["a1", "a2"], "acme"), request("t2", ["d1"])])
    assert [h.outcome for h in hs] == ["planned", "planned"]
    with psycopg.connect(database_url) as conn:
        assert dict(conn.execute("SELECT request_id, tenant FROM jobs").fetchall()) == {"t1": "acme", "t2": "default"}
        assert dict(conn.execute("SELECT guid, tenant FROM tenant_guids").fetchall()) == {
            "a1": "acme", "a2": "acme", "d1": "default"}
    commands = read_topic(kafka_config, topics["batch"], expect=3)
    assert {c["value"]["guid"]: c["value"]["tenant"] for c in commands} == {"a1": "acme", "a2": "acme", "d1": "default"}


def test_refused_tenants_are_dead_lettered_with_the_reason_and_store_nothing(
        database_url: str, kafka_config: dict[str, str], topics: dict[str, str]) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, base_url, max_guids) VALUES ('small', 'http://s', 2)")
    hs = run(database_url, kafka_config, topics, [
        request("u1", ["g1"], "nope"),  # unknown tenant
        request("u2", ["s1", "s2"], "small"),
        request("u3", ["s1"]),  # s1 is small's, not default's
        request("u4", ["s3"], "small"),  # a third guid: over small's max_guids
    ])
    assert [h.outcome for h in hs] == ["dead_lettered", "planned", "dead_lettered", "dead_lettered"]
    assert "unknown tenant 'nope'" in (hs[0].reason or "")
    assert "guid 's1' belongs to another tenant than 'default'" in (hs[2].reason or "")
    assert "over its quota of 2 (max_guids)" in (hs[3].reason or "")
    dlq = read_topic(kafka_config, topics["dlq"], expect=3)
    assert sorted(json.loads(d["raw"])["request_id"] for d in dlq) == ["u1", "u3", "u4"]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT array_agg(request_id) FROM jobs").fetchone() == (["u2"],)
        assert conn.execute("SELECT count(*) FROM tenant_guids").fetchone() == (2,)
