"""The callback intake on real Postgres (tenants, secrets) and real Kafka (acks=all): a signed
callback is on the topic, keyed by guid with its tenant in a header, before it is answered; a
bad signature is refused and counted; a malformed body is dead-lettered with the reason."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
from prometheus_client import CollectorRegistry

from pacer_common.cli import topic_layout
from pacer_common.db.pool import open_pool
from pacer_common.db.tenants import TenantCache
from pacer_common.domain.tenants import sign
from pacer_common.kafka import ensure_topics
from pacer_common.ops import Health
from pacer_common.settings import KafkaSettings
from pacer_intake.adapters.kafka import KafkaCallbackLog, callback_producer
from pacer_intake.app import build_app
from pacer_intake.core import Intake
from pacer_intake.settings import IntakeSettings
from tests.integration.helpers import read_topic


@contextlib.asynccontextmanager
async def intake(url: str, kafka_config: dict[str, str], prefix: str, registry: CollectorRegistry,
                 topics: dict[str, tuple[int, dict[str, str]]] | None = None) -> AsyncIterator[httpx.AsyncClient]:
    topics = topics or {f"{prefix}.callbacks": (2, {}), f"{prefix}.callbacks.dlq": (1, {})}
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


def test_the_largest_callback_the_intake_takes_is_on_the_topic_pacer_topics_makes(
        database_url: str, kafka_config: dict[str, str], topic_prefix: str) -> None:
    # Without its topic config the broker's default (about 1 MiB with the record's overhead)
    # refused it, and the gateway was told 503 for ever.
    layout = topic_layout(KafkaSettings(kafka_bootstrap_servers=kafka_config["bootstrap.servers"],
                                        topic_prefix=topic_prefix))
    topics = {t: layout[t] for t in (f"{topic_prefix}.callbacks", f"{topic_prefix}.callbacks.dlq")}
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, callback_secret) VALUES ('acme', 'acme-secret')")
    head = json.dumps({"cmd": "message.received", "guid": "g-big", "ts": 1, "data": {"content": ""}}).encode()[:-3]
    body = head + base64.b64encode(os.urandom(1_048_576))[: IntakeSettings().max_body_bytes - len(head) - 3] + b'"}}'
    assert len(body) == IntakeSettings().max_body_bytes

    async def go() -> int:
        async with intake(database_url, kafka_config, topic_prefix, CollectorRegistry(), topics) as client:
            return (await post(client, "acme", body, sign("acme-secret", body))).status_code

    assert asyncio.run(go()) == 200
    (got,) = read_topic(kafka_config, f"{topic_prefix}.callbacks", expect=1)
    assert got["key"] == b"g-big" and got["raw"] == body


def test_a_signed_device_status_the_reconciler_could_not_act_on_is_dead_lettered_with_its_reason(
        database_url: str, kafka_config: dict[str, str], topic_prefix: str) -> None:
    # Answered 200 and appended, the reconciler skipped it ("ts: Input should have timezone
    # info"): the guid's kicked state was lost, with nothing in the dead-letter topic.
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, callback_secret) VALUES ('acme', 'acme-secret')")
    naive = b'{"cmd":"device.status","guid":"g1","ts":"2026-01-01T10:00:00","data":{"status":"kicked"}}'
    good = naive.replace(b'10:00:00"', b'10:00:00+08:00"')

    async def go() -> list[tuple[int, Any]]:
        async with intake(database_url, kafka_config, topic_prefix, CollectorRegistry()) as client:
            answers = [await post(client, "acme", raw, sign("acme-secret", raw)) for raw in (naive, good)]
            return [(a.status_code, a.json()) for a in answers]

    assert asyncio.run(go()) == [
        (400, {"code": 400, "msg": "malformed callback, dead-lettered: not a callback: ts: Input should have "
                                  "timezone info"}),
        (200, {"code": 0, "msg": "ok"})]
    (dead,) = read_topic(kafka_config, f"{topic_prefix}.callbacks.dlq", expect=1)
    assert dead["raw"] == naive and dead["headers"]["pacer-tenant"] == b"acme"
    assert dead["headers"]["pacer-error-reason"] == b"not a callback: ts: Input should have timezone info"
    assert dead["headers"]["pacer-error-source"] == b"intake"
    assert [(m["key"], m["raw"]) for m in read_topic(kafka_config, f"{topic_prefix}.callbacks", expect=1)] == [
        (b"g1", good)]
