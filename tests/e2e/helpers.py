"""Helpers for end-to-end tests: building and publishing requests, reading a job's state and
the sends the fake gateway saw."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import psycopg

from pacer_common.kafka import make_producer, produce_all
from pacer_dev.stack import Stack
from tests.e2e.conftest import gateway


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


def campaign_again(stack: Stack, rid: str, guids: int, tag: str = "again") -> str:
    """Publish one more item on each guid of the ``guids``-guid campaign ``rid`` (recipients
    ``<tag>-room-N``); returns the new request's id."""
    req = request(guids, guids)
    for target in req["targets"]["items"]:
        target["guid"] = target["guid"].replace(str(req["request_id"]), rid)
        target["to_id"] = f"{tag}-{target['to_id']}"
    publish(stack, json.dumps(req).encode(), key=str(req["request_id"]).encode())
    return str(req["request_id"])


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


def sends_for(stack: Stack, prefix: str) -> list[dict]:
    out: list[dict] = []
    offset = 0
    while True:
        page = gateway(stack, f"/_admin/sends?limit=1000&offset={offset}")
        sends = page["sends"] if isinstance(page, dict) else page
        if not sends:
            return [s for s in out if s["guid"].startswith(prefix)]
        out.extend(sends)
        offset += len(sends)
