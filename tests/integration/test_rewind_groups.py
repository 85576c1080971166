"""``pacer rewind-groups`` moves the planners' and the reconcilers' callback consumer groups
back to a restore point on the real broker: what they read since is read again, a group that
had not got that far is not moved forward, and a group with members is refused."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime

import psycopg
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from pacer_common.cli import EXIT_REFUSED, EXIT_UNAVAILABLE, main
from pacer_common.db.pool import open_pool
from pacer_common.kafka import AsyncConsumer, ensure_topics, make_consumer, make_producer
from pacer_dev.infra.process import free_ports
from pacer_planner.adapters.faults import ENVIRONMENT
from pacer_planner.adapters.kafka import KafkaCommandBus, KafkaRequestSource
from pacer_planner.adapters.postgres import PostgresJobStore, PostgresPositions
from pacer_planner.core import Handled, Planner
from pacer_planner.core.consume import IntakeLoop, IntakePolicy
from tests.integration.control_support import audit
from tests.integration.helpers import commit_offsets


def _committed(kafka_config: dict[str, str], group: str, topic: str, partitions: int) -> list[int]:
    asked = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])]
    admin = AdminClient(dict(kafka_config))  # held until the answer: a client dropped cancels its requests
    (fut,) = admin.list_consumer_group_offsets(asked).values()
    return [tp.offset for tp in sorted(fut.result(30).topic_partitions, key=lambda tp: tp.partition)]


def _rewind(*args: str) -> int:
    with pytest.raises(SystemExit) as ended:
        main(["rewind-groups", *args])
    return int(ended.value.code or 0)


def test_groups_go_back_to_the_restore_point_never_forward_and_not_while_they_have_members(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    requests, callbacks = f"{topic_prefix}.job-requests", f"{topic_prefix}.callbacks"
    planner, reconciler = f"{topic_prefix}.planner", f"{topic_prefix}.reconciler.callbacks"
    ensure_topics(kafka_config, {requests: (2, {}), callbacks: (1, {})})
    now_ms = int(time.time() * 1000)
    before_ms, after_ms = now_ms - 120_000, now_ms - 60_000  # the restore point lies between
    producer = make_producer(kafka_config)
    for topic, partition, old, new in ((requests, 0, 4, 3), (requests, 1, 4, 3), (callbacks, 0, 3, 2)):
        for k in range(old + new):
            producer.produce(topic, f"{k}".encode(), partition=partition, timestamp=before_ms if k < old else after_ms)
    assert producer.flush(30) == 0
    # The planner read all of partition 0, but only 2 records of partition 1 (before the
    # restore point: it must not be moved forward); the reconciler read all its callbacks.
    commit_offsets(kafka_config, planner, [TopicPartition(requests, 0, 7), TopicPartition(requests, 1, 2)])
    commit_offsets(kafka_config, reconciler, [TopicPartition(callbacks, 0, 5)])

    monkeypatch.setenv("PACER_KAFKA_BOOTSTRAP_SERVERS", kafka_config["bootstrap.servers"])
    monkeypatch.setenv("PACER_TOPIC_PREFIX", topic_prefix)
    monkeypatch.setenv("PACER_DATABASE_URL", database_url)
    restore_point = datetime.fromtimestamp((before_ms + after_ms) / 2000, UTC).isoformat()
    assert _rewind("--to", restore_point) == EXIT_REFUSED, "refused without --services-stopped"
    assert _committed(kafka_config, planner, requests, 2) == [7, 2]

    assert _rewind("--services-stopped", "--to", restore_point) == 0
    assert _committed(kafka_config, planner, requests, 2) == [4, 2]
    assert _committed(kafka_config, reconciler, callbacks, 1) == [3]
    out, err = capsys.readouterr()
    assert f"group {planner} {requests}[0]: 7 → 4" in out and f"{requests}[1]: 2 → 2 (kept)" in out
    # No planner recorded a position in this database: by the timestamps alone, and it says so.
    assert f"warning: the database records no position of group {planner}" in err
    # Recorded in the database, where `pacer after-restore --to` the same point looks for it.
    (record,) = [a for a in audit(database_url) if a["action"] == "rewind_groups"]
    assert (record["target_type"], record["target_id"]) == ("consumer_groups", topic_prefix)
    assert record["after"] == {"to": restore_point, "groups": {
        planner: {"topic": requests, "offsets": {"0": [7, 4], "1": [2, 2]}},
        reconciler: {"topic": callbacks, "offsets": {"0": [5, 3]}}}}

    # A group with a member is refused, moved or not: the member would commit over it.
    member = make_consumer(kafka_config, planner)
    member.subscribe([requests])
    deadline = time.monotonic() + 60
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.5)
    assert member.assignment(), "the member joined the group"
    try:
        assert _rewind("--services-stopped", "--to", restore_point) == EXIT_REFUSED
        assert f"refused: group {planner} has 1 member(s)" in capsys.readouterr().err
        assert _committed(kafka_config, planner, requests, 2) == [4, 2]
    finally:
        member.close()


def test_nothing_is_moved_while_the_database_does_not_answer(
        kafka_config: dict[str, str], topic_prefix: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Where the planners had got to is read from the restored database first: without it a
    # request read before the restore point and stored after it could be passed over.
    requests, planner = f"{topic_prefix}.job-requests", f"{topic_prefix}.planner"
    ensure_topics(kafka_config, {requests: (1, {}), f"{topic_prefix}.callbacks": (1, {})})
    producer = make_producer(kafka_config)
    for _ in range(3):
        producer.produce(requests, b"r", partition=0)
    assert producer.flush(30) == 0
    commit_offsets(kafka_config, planner, [TopicPartition(requests, 0, 3)])
    monkeypatch.setenv("PACER_KAFKA_BOOTSTRAP_SERVERS", kafka_config["bootstrap.servers"])
    monkeypatch.setenv("PACER_TOPIC_PREFIX", topic_prefix)
    monkeypatch.setenv("PACER_DATABASE_URL", f"postgresql://pacer@127.0.0.1:{free_ports(1)[0]}/pacer?connect_timeout=2")
    assert _rewind("--services-stopped", "--to", "2026-01-01T00:00:00Z") == EXIT_UNAVAILABLE
    assert "nothing moved: where the planners had got to is read from the restored database" in capsys.readouterr().err
    assert _committed(kafka_config, planner, requests, 1) == [3]


def _request(rid: str) -> bytes:
    return json.dumps({"request_id": rid, "kind": "campaign", "created_by": "t", "message": {"content": "hi"},
                       "targets": {"items": [{"guid": f"g-{rid}", "to_id": "room"}]}}).encode()


async def _plan(database_url: str, kafka_config: dict[str, str], topic_prefix: str, n: int) -> None:
    """A planner (its intake loop, recording its positions as the service does) handles the
    next ``n`` requests of its group."""
    group = f"{topic_prefix}.planner"
    pool = await open_pool(database_url, min_size=1, max_size=2)
    consumer = AsyncConsumer(make_consumer(kafka_config, group))
    await consumer.call(consumer.consumer.subscribe, [f"{topic_prefix}.job-requests"])
    stop, handled = asyncio.Event(), []

    class Events:
        def handled(self, result: Handled) -> None:
            handled.append(result.outcome)
            if len(handled) == n:
                stop.set()

        def environment_fault(self) -> None: ...
        def internal_error(self) -> None: ...

    lanes = {lane: f"{topic_prefix}.item-commands.{lane}" for lane in ("online", "batch")}
    bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: lanes[lane], f"{topic_prefix}.job-requests.dlq")
    try:
        source = KafkaRequestSource(consumer, PostgresPositions(pool, group).save)
        await asyncio.wait_for(IntakeLoop(Planner(PostgresJobStore(pool), bus), source, IntakePolicy(ENVIRONMENT),
                                          Events(), stop).run(), 60)
    finally:
        await consumer.close()
        await pool.close()
    assert handled == ["planned"] * n


def test_a_request_read_before_the_restore_point_and_stored_after_it_is_planned_again(
        kafka_config: dict[str, str], topic_prefix: str, database_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    requests, planner = f"{topic_prefix}.job-requests", f"{topic_prefix}.planner"
    ensure_topics(kafka_config, {requests: (1, {}), f"{topic_prefix}.callbacks": (1, {}),
                                 f"{topic_prefix}.item-commands.online": (1, {}),
                                 f"{topic_prefix}.item-commands.batch": (1, {}),
                                 f"{topic_prefix}.job-requests.dlq": (1, {})})
    now_ms = int(time.time() * 1000)
    producer = make_producer(kafka_config)

    def publish(*stamped: tuple[str, int]) -> None:
        for rid, at_ms in stamped:
            producer.produce(requests, _request(rid), key=rid.encode(), partition=0, timestamp=at_ms)
        assert producer.flush(30) == 0

    restore_point = datetime.fromtimestamp((now_ms - 60_000) / 1000, UTC)
    publish(("r0", now_ms - 120_000))
    asyncio.run(_plan(database_url, kafka_config, topic_prefix, 1))  # r0, before the backup
    publish(("r1", now_ms - 90_000), ("r2", now_ms - 30_000))  # r1 before the restore point, r2 after
    with psycopg.connect(database_url) as conn:
        backup = conn.execute("SELECT next_offset FROM consumer_positions WHERE group_id = %s", (planner,)).fetchone()
    assert backup == (1,)
    # r1, stamped before the restore point, is planned after the backup, then r2: the restored
    # database has neither; the group has read both.
    asyncio.run(_plan(database_url, kafka_config, topic_prefix, 2))
    assert _committed(kafka_config, planner, requests, 1) == [3]
    with psycopg.connect(database_url) as conn:  # the database as restored from the backup
        lost = "(SELECT job_id FROM jobs WHERE request_id <> 'r0')"
        conn.execute(f"DELETE FROM items WHERE job_id IN {lost}")
        conn.execute(f"DELETE FROM shard_status_counts WHERE shard_id IN (SELECT shard_id FROM shards WHERE job_id IN {lost})")
        conn.execute(f"DELETE FROM shards WHERE job_id IN {lost}")
        conn.execute("DELETE FROM jobs WHERE request_id <> 'r0'")
        conn.execute("UPDATE consumer_positions SET next_offset = 1 WHERE group_id = %s", (planner,))

    monkeypatch.setenv("PACER_KAFKA_BOOTSTRAP_SERVERS", kafka_config["bootstrap.servers"])
    monkeypatch.setenv("PACER_TOPIC_PREFIX", topic_prefix)
    monkeypatch.setenv("PACER_DATABASE_URL", database_url)
    assert _rewind("--services-stopped", "--to", restore_point.isoformat()) == 0
    # To r1 (offset 1), where the restored database says the planners had got to; the
    # broker's timestamps alone would have gone back to r2 only (offset 2).
    out, err = capsys.readouterr()
    assert f"group {planner} {requests}[0]: 3 → 1" in out and "records no position" not in err
    asyncio.run(_plan(database_url, kafka_config, topic_prefix, 2))
    with psycopg.connect(database_url) as conn:
        assert sorted(r for (r,) in conn.execute("SELECT request_id FROM jobs").fetchall()) == ["r0", "r1", "r2"]
