"""Item commands are doorbells: their offsets are committed once noted, whatever their items
wait for; an unreadable command rings its key's guid; the guid's work is read from Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import psycopg
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry, Counter

from pacer_common.db.pool import open_pool
from pacer_common.domain.commands import ItemCommand
from pacer_common.kafka import AsyncConsumer, ensure_topics, make_consumer, make_producer, produce_all
from pacer_sender.adapters.kafka import ConsumerLoop
from pacer_sender.adapters.postgres import PostgresGuidLeases
from pacer_sender.adapters.queue import PostgresGuidQueue
from pacer_sender.core import Executed
from pacer_sender.dispatcher import Dispatcher
from pacer_sender.domain.pacing import Limits
from pacer_sender.leases import GuidLeases
from tests.integration.helpers import eventually, seed_job
from tests.unit.dispatching import BeforeCall


class Recorder:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def execute(self, cmd: ItemCommand, before_call: BeforeCall = None, spare_s: float = 0.0) -> Executed:
        if before_call is not None:
            await before_call()
        self.sent.append(cmd.item_id)
        return Executed("confirmed", True)


def command(url: str, item_id: str) -> ItemCommand:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT item_id::text, job_id::text, shard_id, guid, to_id, content, idem_key, priority, kind,"
            " expire_at, not_before FROM items WHERE item_id = %s", (item_id,)).fetchone()
    assert row is not None, f"item {item_id} is stored"
    keys = ["item_id", "job_id", "shard_id", "guid", "to_id", "content", "idem_key", "priority", "kind",
            "expire_at", "not_before"]
    return ItemCommand.model_validate(dict(zip(keys, row, strict=True)))


def committed(kafka_config: dict[str, str], group: str, topic: str, partitions: int) -> int:
    c = Consumer({**kafka_config, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return sum(max(tp.offset, 0) for tp in got)
    finally:
        c.close()


def consume(database_url: str, kafka_config: dict[str, str], topic_prefix: str, rec: Recorder,
            done: Callable[[], bool], what: str, guid_cap: int = 50) -> int:
    """Run a sender's consumer loop and dispatcher (executing through ``rec``, on Postgres
    guid leases) on the lane topics until ``done()`` (failing with ``what`` if a minute
    passes first); how many commands were unreadable."""
    online, batch = f"{topic_prefix}.item-commands.online", f"{topic_prefix}.item-commands.batch"

    async def scenario() -> int:
        pool = await open_pool(database_url, min_size=1, max_size=4)
        leases = GuidLeases(PostgresGuidLeases(pool, timedelta(seconds=30)), "me", 30.0)
        dispatcher = Dispatcher(rec, lambda g: Limits(min_interval_s=0, jitter_s=0),  # type: ignore[arg-type]  # a Recorder for the Executor
                                leases, PostgresGuidQueue(pool), guid_cap=guid_cap)
        consumer = AsyncConsumer(make_consumer(kafka_config, f"{topic_prefix}.sender", protocol="consumer",
                                               remote_assignor="range"))
        bad = Counter("bad", "bad", registry=CollectorRegistry())
        loop = ConsumerLoop(consumer, dispatcher, bad, online, batch)
        dispatcher.owns = loop.owns
        stop = asyncio.Event()
        task = asyncio.create_task(loop.run(stop))

        async def finished() -> bool:
            return done()

        try:
            await eventually(finished, 60, what)
        finally:
            stop.set()
            await task
            await consumer.close()
            await pool.close()
        return int(bad._value.get())

    return asyncio.run(scenario())


def test_scheduled_commands_are_committed_at_once_and_an_unreadable_one_rings_its_guid(
        database_url: str, kafka_config: dict[str, str], topic_prefix: str) -> None:
    online, batch = f"{topic_prefix}.item-commands.online", f"{topic_prefix}.item-commands.batch"
    ensure_topics(kafka_config, {online: (2, {}), batch: (2, {})})
    _, _, later = seed_job(database_url, {"g-later": 3})
    _, _, (ready,) = seed_job(database_url, {"g-ready": 1})
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE items SET not_before = now() + interval '1 hour' WHERE item_id = ANY(%s)", (later,))
    messages = [(batch, b"g-later", command(database_url, i).model_dump_json().encode(), None) for i in later]
    messages.append((batch, b"g-ready", b"{not an item command", None))
    produce_all(make_producer(kafka_config), messages)
    group = f"{topic_prefix}.sender"
    rec = Recorder()
    bad = consume(database_url, kafka_config, topic_prefix, rec,
                  lambda: bool(rec.sent) and committed(kafka_config, group, batch, 2) >= len(messages),
                  "an item sent and every command committed")
    sent = rec.sent
    assert committed(kafka_config, group, batch, 2) == len(messages), "every command committed, scheduled or not"
    assert sent == [ready], "the unreadable command rang its guid, whose item was read from Postgres"
    assert bad == 1
    with psycopg.connect(database_url) as conn:
        still = conn.execute("SELECT count(*) FROM items WHERE item_id = ANY(%s) AND status = 'pending'",
                             (later,)).fetchone()[0]
    assert still == 3, "scheduled items wait in Postgres"


class Taking(Recorder):
    """Records each item sent and takes it out of the guid's ready work, as a send would."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    async def execute(self, cmd: ItemCommand, before_call: BeforeCall = None, spare_s: float = 0.0) -> Executed:
        if before_call is not None:
            await before_call()
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            await conn.execute("UPDATE items SET held = true WHERE item_id = %s", (cmd.item_id,))
        self.sent.append(cmd.item_id)
        await asyncio.sleep(0.05)
        return Executed("confirmed", True)


def test_a_ticket_whose_doorbell_reaches_a_full_window_goes_out_with_the_next_sends(
        database_url: str, kafka_config: dict[str, str], topic_prefix: str) -> None:
    online, batch = f"{topic_prefix}.item-commands.online", f"{topic_prefix}.item-commands.batch"
    ensure_topics(kafka_config, {online: (2, {}), batch: (2, {})})
    _, _, campaign = seed_job(database_url, {"g-deep": 80})
    _, _, (ticket,) = seed_job(database_url, {"g-deep": 1})
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE items SET priority = 2, kind = 'ticket_notify' WHERE item_id = %s", (ticket,))
    # The campaign's commands fill the guid's window (20) and more; the ticket's comes last.
    messages = [(batch, b"g-deep", command(database_url, i).model_dump_json().encode(), None)
                for i in [*campaign, ticket]]
    produce_all(make_producer(kafka_config), messages)

    rec = Taking(database_url)
    consume(database_url, kafka_config, topic_prefix, rec, lambda: ticket in rec.sent, "the ticket sent", guid_cap=20)
    sent = rec.sent
    assert ticket in sent, "the ticket was sent"
    assert sent.index(ticket) <= 4, f"the ticket waited behind the window: sent {sent.index(ticket)} campaign items first"
    assert len(set(sent)) == len(sent), "nothing sent twice"
