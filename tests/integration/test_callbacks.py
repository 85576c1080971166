"""The reconciler's callbacks consumer on real Kafka and Postgres: device.status moves a
guid's lifecycle in the order of the events' ts, whatever order, repeats or garbage the
topic holds; and the stored rule (pacer_set_guid_state) is the domain's rule."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pacer_common.db.pool import open_pool
from pacer_common.domain.guid_health import GuidHealth, GuidState, StatusEvent, apply
from pacer_common.kafka import AsyncConsumer, ensure_topics, make_consumer, make_producer, produce_all
from pacer_reconciler.adapters.callbacks import KafkaCallbackSource
from pacer_reconciler.adapters.postgres import PostgresGuidStates
from pacer_reconciler.callbacks import CallbackConsumer

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def body(guid: str, status: str, s: int, cmd: str = "device.status") -> bytes:
    return json.dumps({"cmd": cmd, "guid": guid, "ts": (T0 + timedelta(seconds=s)).isoformat(),
                       "data": {"status": status}}).encode()


def consume_all(url: str, kafka_config: dict[str, str], topic: str, group: str, n: int) -> Counter[tuple[str, str]]:
    """What the callbacks consumer made of the first ``n`` records of ``topic``, in group
    ``group``, on the real database: (cmd, result) → how many."""

    async def go() -> Counter[tuple[str, str]]:
        pool = await open_pool(url, min_size=1, max_size=2)
        kc = AsyncConsumer(make_consumer(kafka_config, group))
        await kc.call(kc.consumer.subscribe, [topic])
        consumer = CallbackConsumer(KafkaCallbackSource(kc), PostgresGuidStates(pool))
        try:
            deadline = asyncio.get_running_loop().time() + 60
            while sum(consumer.handled.values()) < n:
                assert asyncio.get_running_loop().time() < deadline, dict(consumer.handled)
                await consumer.round(1.0)
            return consumer.handled
        finally:
            await kc.close()
            await pool.close()

    return asyncio.run(go())


def test_callbacks_from_the_topic_move_guids_in_event_order_and_bad_ones_are_skipped(
        database_url: str, kafka_config: dict[str, str], topic_prefix: str) -> None:
    topic = f"{topic_prefix}.callbacks"
    ensure_topics(kafka_config, {topic: (2, {})})
    records = [
        body("ga", "online", 0), body("ga", "kicked", 10), body("ga", "kicked", 10),  # a duplicate
        body("ga", "online", 5),  # late: older than kicked@10
        b"{not json", b"", json.dumps({"cmd": "device.status", "guid": "ga", "ts": "2026-11-30T09:00:00",
                                       "data": {"status": "online"}}).encode(),  # a time without a zone
        body("ga", "asleep", 20),  # not a state
        json.dumps({"cmd": "device.status", "guid": "ga\u0000x", "ts": 1, "data": {"status": "online"}}).encode(),
        body("gb", "unauthorized", 3), body("gb", "online", 4),
        json.dumps({"cmd": "message.received", "guid": "gb", "ts": 1764493200,
                    "data": {"msgUid": "m1", "fromId": "u", "content": "hi"}}).encode(),
        json.dumps({"cmd": "media.ready", "guid": "gb", "ts": 1764493200000,
                    "data": {"mediaId": "m-1", "ok": True}}).encode(),
    ]
    produce_all(make_producer(kafka_config), [(topic, (b"ga" if b'"ga' in r else b"gb"), r, None) for r in records])

    handled = consume_all(database_url, kafka_config, topic, f"{topic_prefix}.cb", len(records))
    assert handled == {("device.status", "applied"): 4, ("device.status", "stale"): 2, ("other", "bad"): 5,
                       ("other", "ignored"): 1, ("media.ready", "stale"): 1}  # no such media
    with psycopg.connect(database_url) as conn:
        states: dict[str, str] = dict(conn.execute("SELECT guid, state::text FROM guid_states").fetchall())
        history = conn.execute("SELECT guid, previous::text, state::text FROM guid_state_history "
                               "ORDER BY guid, id").fetchall()
    assert states == {"ga": "kicked", "gb": "online"}
    assert history == [("ga", None, "online"), ("ga", "online", "kicked"),
                       ("gb", None, "unauthorized"), ("gb", "unauthorized", "online")]


events = st.lists(st.tuples(st.sampled_from(list(GuidState)), st.integers(0, 20)), min_size=1, max_size=10)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(evs=events, seed=st.integers(0, 1000))
def test_the_stored_rule_is_the_domain_rule(database_url: str, evs: list[tuple[GuidState, int]], seed: int) -> None:
    """Generated events in any order with repeats: Postgres ends where the domain does, and its
    history holds exactly the domain's changes."""
    order = evs + random.Random(seed).sample(evs, k=len(evs) // 2)
    guid = f"h{seed}-{random.Random().getrandbits(40)}"
    h: GuidHealth | None = None
    changes = []
    with psycopg.connect(database_url, autocommit=True) as conn:
        for state, s in order:
            ev = StatusEvent(state, T0 + timedelta(seconds=s), "callback")
            h, changed = apply(h, ev)
            (stored,) = conn.execute("SELECT changed FROM pacer_set_guid_state(%s, %s, 'callback', NULL, %s)",
                                     (guid, state.value, ev.ts)).fetchone()
            assert stored == changed
            if changed:
                changes.append(state.value)
        row = conn.execute("SELECT state::text, event_ts, changes FROM guid_states WHERE guid = %s", (guid,)).fetchone()
        hist = [r[0] for r in conn.execute("SELECT state::text FROM guid_state_history WHERE guid = %s ORDER BY id",
                                           (guid,)).fetchall()]
    assert h is not None and row == (h.state.value, h.event_ts, h.changes)
    assert hist == changes


def test_a_tenants_callbacks_change_only_its_guids_and_a_ts_ahead_is_taken_as_now(
        database_url: str, kafka_config: dict[str, str], topic_prefix: str) -> None:
    topic = f"{topic_prefix}.callbacks"
    ensure_topics(kafka_config, {topic: (1, {})})
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name) VALUES ('acme'), ('globex')")
        conn.execute("INSERT INTO tenant_guids (guid, tenant) VALUES ('g-acme', 'acme')")
        conn.execute("INSERT INTO media (guid, url_hash, url, kind, media_id, status)"
                     " VALUES ('g-acme', 'h', 'https://x/a.png', 'image', 'm-1', 'pending')")
    far = json.dumps({"cmd": "device.status", "guid": "g-new", "ts": "9999-01-01T00:00:00+00:00",
                      "data": {"status": "kicked"}}).encode()
    ready = json.dumps({"cmd": "media.ready", "guid": "g-acme", "ts": 1, "data": {"mediaId": "m-1", "ok": True}})
    records = [  # (tenant whose signature the intake checked, body)
        ("globex", body("g-acme", "kicked", 1)),  # another tenant's guid: not globex's to hold
        ("globex", ready.encode()),  # nor its media
        ("acme", body("g-acme", "unauthorized", 2)),
        ("globex", body("g-free", "offline", 3)),  # a guid no job has named yet
        ("globex", far),  # a year-9999 ts: taken as now (+5 min), so a later event still applies
    ]
    produce_all(make_producer(kafka_config), [(topic, b"k", raw, [("pacer-tenant", tenant.encode())])
                                              for tenant, raw in records])

    handled = consume_all(database_url, kafka_config, topic, f"{topic_prefix}.cb-tenants", len(records))
    assert handled == {("device.status", "foreign"): 1, ("media.ready", "foreign"): 1,
                       ("device.status", "applied"): 3}
    with psycopg.connect(database_url) as conn:
        states: dict[str, str] = dict(conn.execute("SELECT guid, state::text FROM guid_states").fetchall())
        (media,) = conn.execute("SELECT status FROM media WHERE guid = 'g-acme'").fetchone() or ("?",)
        (dated,) = conn.execute("SELECT event_ts < now() + interval '6 minutes' FROM guid_states"
                                " WHERE guid = 'g-new'").fetchone() or (False,)
    assert states == {"g-acme": "unauthorized", "g-free": "offline", "g-new": "kicked"}
    assert media == "pending", "another tenant's media.ready settles nothing"
    assert dated, "a ts ahead of the clock is taken as now, not as year 9999"
