"""Fault scenarios for "Postgres is the record of every queue": Kafka loses the commands."""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from confluent_kafka import OFFSET_END, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from pacer_common.kafka import make_producer, produce_all
from pacer_dev.chaos.harness import Scenario, close_scenario, open_scenario
from pacer_dev.infra import Infra

if TYPE_CHECKING:
    from pacer_dev.chaos.scenarios import Size

Result = tuple[dict[str, int], tuple[str, ...]]


def retention_loss(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """A job scheduled a few seconds ahead, with a backlog per guid far past the senders'
    memory window; its item commands are deleted from Kafka (retention shortened on the
    command topics) and every sender is killed once sending is under way. The new senders
    get no command at all: they must find the work in Postgres, and deliver each item once."""
    items, guids, timeout_s = size.items, size.guids, size.timeout_s
    sc = open_scenario("retention-loss", inf, root, senders=2,
                       env={"PACER_SENDER_GUID_BUFFER": "4", "PACER_SENDER_SWEEP_S": "2"})
    try:
        _publish_scheduled(sc, items, guids, delay_s=4.0)
        _wait(lambda: _dispatched(sc), 60, "the job's commands to be produced")
        deleted = _drop_commands(sc)
        sc.wait_progress(0.2)
        for name in [n for n in sc.stack.procs if n.startswith("sender")]:
            sc.stack.kill(name)
        for n in (3, 4):
            sc.stack.start_service("sender", f"sender-{n}")
        done = sc.wait_done(timeout_s)
        fig = sc.measure()
        fig["completed"] = int(done)
        fig["deleted"] = deleted
        fig["swept"] = sum(int(sc.stack.metric(name, "pacer_sender_swept_guids_total") or 0)
                           for name in sc.stack.procs if name.startswith("sender"))
        return fig, ("deleted", "swept", "completed")
    finally:
        close_scenario(sc)


def _publish_scheduled(sc: Scenario, items: int, guids: int, delay_s: float) -> None:
    rid = f"chaos-{sc.name}-{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC)
    body = json.dumps({
        "request_id": rid, "kind": "campaign", "created_by": "chaos", "content_version": 1,
        "message": {"type": "text", "content": "Hello {n}"},
        "targets": {"mode": "snapshot", "items": [
            {"guid": f"{sc.name}-g{i % guids:03d}", "to_id": f"room-{i:06d}", "vars": {"n": str(i)}}
            for i in range(items)]},
        "not_before": (now + timedelta(seconds=delay_s)).isoformat(),
        "expire_at": (now + timedelta(hours=2)).isoformat(),
    }).encode()
    produce_all(make_producer({"bootstrap.servers": sc.infra.kafka_bootstrap}),
                [(f"{sc.stack.topic_prefix}.job-requests", rid.encode(), body, None)])
    sc.request_id, sc.items = rid, items


def _dispatched(sc: Scenario) -> bool:
    with psycopg.connect(sc.db) as conn:
        row = conn.execute("SELECT dispatched_at IS NOT NULL FROM jobs WHERE request_id = %s",
                           (sc.request_id,)).fetchone()
    return bool(row and row[0])


def _drop_commands(sc: Scenario) -> int:
    """Shorten the command topics' retention, and delete their records now (what the broker's
    retention check would do within ``log.retention.check.interval.ms``); returns how many
    commands were deleted."""
    conf = {"bootstrap.servers": sc.infra.kafka_bootstrap}
    topics = [f"{sc.stack.topic_prefix}.item-commands.{lane}" for lane in ("online", "batch")]
    admin = AdminClient(dict(conf))
    short = [ConfigEntry(k, "1000", incremental_operation=AlterConfigOpType.SET) for k in ("retention.ms", "segment.ms")]
    for fut in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, t, incremental_configs=short) for t in topics]).values():
        fut.result(30)
    meta = admin.list_topics(timeout=10)
    tps = [TopicPartition(t, p) for t in topics for p in meta.topics[t].partitions]
    before = _low_watermarks(conf, tps)
    for fut in admin.delete_records([TopicPartition(tp.topic, tp.partition, OFFSET_END) for tp in tps]).values():
        fut.result(30)
    after = _low_watermarks(conf, tps)
    return sum(after[k] - before[k] for k in before)


def _low_watermarks(conf: dict[str, str], tps: list[TopicPartition]) -> dict[tuple[str, int], int]:
    c = Consumer({**conf, "group.id": f"chaos-{uuid.uuid4().hex}"})
    try:
        return {(tp.topic, tp.partition): c.get_watermark_offsets(tp, timeout=10)[0] for tp in tps}
    finally:
        c.close()


def _wait(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)
