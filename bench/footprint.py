"""``bench footprint``: what one item costs Postgres, end to end.

A campaign of ``BENCH_FOOTPRINT_ITEMS`` items goes through the whole path — request on Kafka,
planner, sender, fake gateway, reconciler — until the job is completed. Printed: WAL bytes
written per item (``pg_current_wal_lsn`` before and after), bytes per item left in tables
and indexes (every table of the database), the three largest tables' share, and rows
written per item in ``item_events``; and the bytes the run left in Kafka per item (keys, values
and headers of every record of its topics, read back from the start: ``kafka_bytes_per_item``,
split into requests, commands and outcomes) and what the broker stores of them on disk
(``kafka_disk_bytes_per_item``: the topics' log segments, the records as the producers
compressed them in batches, with the batches' headers; ``n/a`` against a configured cluster,
whose disks are not on this machine). docs/scale.md multiplies these by a billion items a day.
The text is an ordinary short one unless ``BENCH_FOOTPRINT_TEXT_CHARS`` pads it with Chinese
text to that many characters: two runs at two lengths give what each byte of a campaign's text
adds per item. The text greets each target by a variable of its own, so each item stores its
rendered text; ``BENCH_FOOTPRINT_SHARED_TEXT=1`` sends every target the same text, which the
job stores once (``jobs.item_content``).
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from bench.common import CORES, count, env_int, real_infra, stack, teardown, wait_until
from pacer_common.kafka import make_producer, produce_all
from pacer_dev import infra
from pacer_dev.infra.kafka import home_dir

FAST = {"PACER_SENDER_MIN_INTERVAL_MS": "0", "PACER_SENDER_JITTER_MS": "0", "PACER_SENDER_DB_POOL_MAX": "40"}
TEXT = "Hello {n}, this is a campaign message of ordinary length."
# Per table, a partitioned table's partitions summed (items_p20261130 … count as items).
SIZES = ("SELECT COALESCE(pg_partition_root(c.oid), c.oid)::regclass::text, sum(pg_total_relation_size(c.oid))"
         " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
         " WHERE c.relkind = 'r' AND n.nspname = 'public' GROUP BY 1 ORDER BY 2 DESC")


def footprint() -> str:
    n, guids = env_int("BENCH_FOOTPRINT_ITEMS", 20_000), 200
    text = campaign_text(env_int("BENCH_FOOTPRINT_TEXT_CHARS", 0))
    shared = env_int("BENCH_FOOTPRINT_SHARED_TEXT", 0) == 1
    if shared:
        text = text.replace("{n}", "everyone")
    inf = real_infra()
    st = stack(inf, "footprint", FAST)
    url = st.infra.database_url
    try:
        st.start_gateway()
        for kind in ("planner", "reconciler"):
            st.start_service(kind)
        st.start_service("sender", "sender-1")
        before_sizes = dict(_sizes(url))
        lsn0 = _lsn(url)
        rid = f"footprint-{uuid.uuid4().hex[:8]}"
        body = json.dumps({
            "request_id": rid, "kind": "campaign", "created_by": "bench",
            "message": {"type": "text", "content": text},
            "targets": {"mode": "snapshot", "items": [
                {"guid": f"g{i % guids:04d}", "to_id": f"room-{i:07d}", "vars": {} if shared else {"n": str(i)}}
                for i in range(n)]},
            "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}).encode()
        produce_all(make_producer({"bootstrap.servers": inf.kafka_bootstrap}),
                    [(f"{st.topic_prefix}.job-requests", rid.encode(), body, None)])
        done = wait_until(lambda: count(url, "SELECT count(*) FROM jobs WHERE request_id = %s AND status = 'completed'",
                                        rid) == 1, 1800, poll_s=1.0)
        if not done:
            raise SystemExit(f"bench footprint: the job did not complete in 30 minutes ({_progress(url)})")
        wal = _lsn(url) - lsn0
        sizes = _sizes(url)
        events = count(url, "SELECT count(*) FROM item_events")
        kafka = kafka_bytes(inf.kafka_bootstrap, st.topic_prefix)
        disk = kafka_disk_bytes(inf.state_dir, st.topic_prefix)
    finally:
        teardown(st)
    grown = {name: size - before_sizes.get(name, 0) for name, size in sizes}
    total = sum(grown.values())
    top = sorted(grown.items(), key=lambda kv: -kv[1])[:3]
    shares = " ".join(f"{name}={size / total:.2f}" for name, size in top)
    text_bytes = len(text.replace("{n}", str(n // 2)).encode())
    return (f"bench footprint: items={n} text_bytes={text_bytes} shared_text={int(shared)} "
            f"wal_bytes_per_item={wal / n:.0f} table_bytes_per_item={total / n:.0f} "
            f"events_per_item={events / n:.2f} largest: {shares} kafka_bytes_per_item={_per_item(kafka, n)} "
            f"kafka_disk_bytes_per_item={_per_item(disk, n)} cores={CORES}")


def _per_item(by_topic: dict[str, int] | None, n: int) -> str:
    """``total (topic=bytes …)`` per item, largest topic first; ``n/a`` where not measured."""
    if by_topic is None:
        return "n/a"
    per_topic = " ".join(f"{name}={size / n:.0f}" for name, size in sorted(by_topic.items(), key=lambda kv: -kv[1]))
    return f"{sum(by_topic.values()) / n:.0f} ({per_topic})"


def campaign_text(chars: int) -> str:
    """The campaign's text: the ordinary one, padded to ``chars`` characters with common
    Chinese characters drawn at random (a text that compresses less than a real one would)."""
    rng = random.Random(chars)
    return TEXT + "".join(chr(rng.randrange(0x4E00, 0x5400)) for _ in range(chars - len(TEXT)))


def kafka_bytes(bootstrap: str, prefix: str) -> dict[str, int]:
    """Bytes of every record (key, value, headers) in the topics ``<prefix>.…``, by topic with
    the lane or dead-letter suffix folded (``item-commands.batch`` counts as ``item-commands``)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"footprint-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        topics = [t for name, t in consumer.list_topics(timeout=30).topics.items() if name.startswith(f"{prefix}.")]
        parts = []
        for t in topics:
            for p in t.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(t.topic, p), timeout=30)
                if high > low:
                    parts.append(TopicPartition(t.topic, p, OFFSET_BEGINNING))
        consumer.assign(parts)
        out: dict[str, int] = {}
        open_parts = {(tp.topic, tp.partition) for tp in parts}
        while open_parts:
            msg = consumer.poll(10)
            if msg is None:
                raise SystemExit(f"bench footprint: Kafka stopped answering with {len(open_parts)} partitions unread")
            topic, partition, err = str(msg.topic()), int(msg.partition() or 0), msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise SystemExit(f"bench footprint: reading {topic} back: {err}")
                open_parts.discard((topic, partition))
                continue
            raw = msg.headers() or []
            headers = raw.items() if isinstance(raw, dict) else raw
            size = len(msg.key() or b"") + len(msg.value() or b"") + sum(len(k) + len(v or b"") for k, v in headers)
            name = topic[len(prefix) + 1:].split(".")[0]
            out[name] = out.get(name, 0) + size
        return out
    finally:
        consumer.close()


def kafka_disk_bytes(state: Path, prefix: str) -> dict[str, int] | None:
    """Bytes of the log segments of the topics ``<prefix>.…`` in the bench's own broker, by
    topic folded as :func:`kafka_bytes` folds them; None where the broker is a configured one."""
    kafka = next(s for s in infra.status(state) if s.name == "kafka")
    data = home_dir(state) / "data"
    if kafka.state != "running" or not data.is_dir():
        return None
    out: dict[str, int] = {}
    for part in data.glob(f"{prefix}.*-*"):  # <topic>-<partition>/<base offset>.log, .index, …
        name = part.name.rsplit("-", 1)[0][len(prefix) + 1:].split(".")[0]
        out[name] = out.get(name, 0) + sum(f.stat().st_size for f in part.glob("*.log"))
    return out


def _lsn(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()
        return int(row[0]) if row else 0


def _sizes(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url) as conn:
        return [(str(r[0]), int(r[1])) for r in conn.execute(SIZES).fetchall()]


def _progress(url: str) -> str:
    with psycopg.connect(url) as conn:
        return ", ".join(f"{s}={c}" for s, c in conn.execute("SELECT status, count(*) FROM items GROUP BY 1").fetchall())
