"""Small helpers for integration tests: seeding rows, reading topics, waiting with deadlines."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import psycopg
from confluent_kafka import Consumer

T = TypeVar("T")


def wait_for(check: Callable[[], T | Literal[False] | None], timeout_s: float = 30.0, what: str = "condition") -> T:
    """Poll ``check`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    last: T | Literal[False] | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last value: {last!r}")


def seed_job(url: str, guids: dict[str, int], status: str = "pending") -> tuple[str, dict[str, int], list[str]]:
    """A job with one shard per guid and ``n`` items each; returns (job_id, shard ids, item ids)."""
    job_id = str(uuid.uuid4())
    items: list[str] = []
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version,"
            " target_mode, total, request) VALUES (%s, %s, 'campaign', 3, 't', '{}', 1, 'snapshot', %s, '{}')",
            (job_id, f"req-{job_id}", sum(guids.values())),
        )
        shard_ids = {}
        for guid, n in guids.items():
            (sid,) = conn.execute(
                "INSERT INTO shards (job_id, guid, total) VALUES (%s, %s, %s) RETURNING shard_id", (job_id, guid, n)
            ).fetchone()
            shard_ids[guid] = sid
            conn.execute("INSERT INTO shard_status_counts VALUES (%s, 'pending', %s)", (sid, n))
            for k in range(n):
                item_id = str(uuid.uuid4())
                items.append(item_id)
                conn.execute(
                    "INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind, status)"
                    " VALUES (%s, %s, %s, %s, %s, 'hi', %s, 3, 'campaign', %s)",
                    (item_id, job_id, sid, guid, f"room-{k}", f"k-{item_id}", status),
                )
    return job_id, shard_ids, items


def read_topic(config: dict[str, str], topic: str, expect: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Read ``topic`` from the beginning until ``expect`` messages arrived (or the deadline)."""
    consumer = Consumer({**config, "group.id": f"test-{uuid.uuid4().hex}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expect and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            out.append({"key": msg.key(), "value": json.loads(v) if (v := msg.value()) else None,
                        "raw": msg.value(), "headers": dict(msg.headers() or [])})
        # Give a moment for any unexpected extra messages to show up.
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                out.append({"key": msg.key(), "value": json.loads(v) if (v := msg.value()) else None,
                            "raw": msg.value(), "headers": dict(msg.headers() or [])})
    finally:
        consumer.close()
    return out
