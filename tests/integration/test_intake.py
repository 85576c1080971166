"""The callback intake on real Postgres (tenants, secrets) and real Kafka (acks=all): a signed
callback is on the topic, keyed by guid with its tenant in a header, before it is answered; a
bad signature is refused and counted; a malformed body is dead-lettered with the reason."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
from prometheus_client import CollectorRegistry

from pacer_common.db.pool import open_pool
from pacer_common.db.tenants import TenantCache
from pacer_common.domain.tenants import sign
from pacer_common.kafka import ensure_topics
from pacer_common.ops import Health
from pacer_intake.adapters.kafka import KafkaCallbackLog, callback_producer
from pacer_intake.app import build_app
from pacer_intake.core import Intake
from tests.integration.helpers import read_topic


@contextlib.asynccontextmanager
async def intake(url: str, kafka_config: dict[str, str], prefix: str,
                 registry: CollectorRegistry) -> AsyncIterator[httpx.AsyncClient]:
    topics: dict[str, tuple[int, dict[str, str]]] = {f"{prefix}.callbacks": (2, {}), f"{prefix}.callbacks.dlq": (1, {})}
    ensure_topics(kafka_config, topics)
    pool = await open_pool(url, min_size=1, max_size=2)
    cache = TenantCache(pool, 60.0)
    await cache.reload()
    log = KafkaCallbackLog(callback_producer(kafka_config, 10.0), f"{prefix}.callbacks", f"{prefix}.callbacks.dlq",
                           10.0)
    app = build_app(Intake(cache.get, log), registry, Health())
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://intake") as client:
            yield client
    finally:
        log.close()
        await pool.close()


def counted(registry: CollectorRegistry, tenant: str, result: str) -> float:
    return registry.get_sample_value("pacer_intake_callbacks_total", {"tenant": tenant, "result": result}) or 0.0


def post(client: httpx.AsyncClient, tenant: str, raw: bytes, signature: str | None) -> Any:
    headers = {"Content-Type": "application/json"} | ({"X-Signature": signature} if signature else {})
    return client.post(f"/callbacks/{tenant}", content=raw, headers=headers)


def test_callbacks_round_trip_refusals_are_counted_and_malformed_bodies_dead_lettered(
        database_url: str, kafka_config: dict[str, str], topic_prefix: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, callback_secret) VALUES ('acme', 'acme-secret'),"
                     " ('globex', 'globex-secret')")
    registry = CollectorRegistry()
    status = {"cmd": "device.status", "guid": "g-1", "ts": 1700000000, "data": {"status": "kicked"}}
    message = {"cmd": "message.received", "guid": "g-2", "ts": 1700000001,
               "data": {"msgUid": "m-1", "fromId": "c-1", "content": "hello"}}
    bodies = [json.dumps(status).encode(), json.dumps(message).encode()]

    async def go() -> list[int]:
        async with intake(database_url, kafka_config, topic_prefix, registry) as client:
            codes = [(await post(client, "acme", bodies[0], sign("acme-secret", bodies[0]))).status_code,
                     (await post(client, "globex", bodies[1], sign("globex-secret", bodies[1]))).status_code]
            # globex's secret does not sign acme's callbacks
            codes.append((await post(client, "acme", bodies[1], sign("globex-secret", bodies[1]))).status_code)
            codes.append((await post(client, "acme", bodies[1], None)).status_code)
            codes.append((await post(client, "made-up", bodies[1], sign("x", bodies[1]))).status_code)
            bad = b'{"cmd": "media.ready"'
            codes.append((await post(client, "acme", bad, sign("acme-secret", bad))).status_code)
            return codes

    assert asyncio.run(go()) == [200, 200, 401, 401, 404, 400]
    got = read_topic(kafka_config, f"{topic_prefix}.callbacks", expect=2)
    assert sorted((m["key"], m["headers"]["pacer-tenant"], m["raw"]) for m in got) == [
        (b"g-1", b"acme", bodies[0]), (b"g-2", b"globex", bodies[1])]
    dead = read_topic(kafka_config, f"{topic_prefix}.callbacks.dlq", expect=1)
    assert [(d["raw"], d["headers"]["pacer-tenant"]) for d in dead] == [(b'{"cmd": "media.ready"', b"acme")]
    assert dead[0]["headers"]["pacer-error-reason"].startswith(b"not JSON")
    assert counted(registry, "acme", "accepted") == 1 and counted(registry, "globex", "accepted") == 1
    assert counted(registry, "acme", "bad_signature") == 2
    assert counted(registry, "unknown", "unknown_tenant") == 1  # a made-up name is not a label
    assert counted(registry, "acme", "dead_lettered") == 1
