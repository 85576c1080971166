"""``make demo``: Pacer end to end on real Kafka and Postgres, with one summary line.

Starts Kafka, Postgres, the fake gateway and the three services, publishes one campaign
(``DEMO_ITEMS`` items over ``DEMO_GUIDS`` guids, fast pacing), shows progress, and prints:

    demo: items=2000 confirmed=2000 duplicates=0 lost=0 elapsed=12.3s

Figures come from Postgres and the fake gateway's records, never from the demo's own
counters. Everything it started is stopped at the end.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from tqdm import tqdm

from pacer_common.domain.status import TERMINAL
from pacer_common.kafka import make_producer, produce_all
from pacer_dev import infra
from pacer_dev.stack import Stack, prepare

TERMINAL_SQL = [s.value for s in TERMINAL]


def build_request(request_id: str, items: int, guids: int) -> dict[str, object]:
    return {
        "request_id": request_id,
        "kind": "campaign",
        "created_by": "demo",
        "message": {"type": "text", "content": "Hello {name}, your order {order} has shipped."},
        "content_version": 1,
        "targets": {"mode": "snapshot", "items": [
            {"guid": f"g-{i % guids:03d}", "to_id": f"room-{i:06d}", "vars": {"name": f"C{i}", "order": f"O{i}"}}
            for i in range(items)
        ]},
        "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
    }


def gateway_stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/_admin/stats", timeout=10) as resp:
        return json.loads(resp.read())


def progress(conn: psycopg.Connection[tuple[Any, ...]], request_id: str) -> tuple[int, int, int]:
    """(total, terminal, confirmed) for the job, from Postgres."""
    row = conn.execute(
        "SELECT j.total,"
        " (SELECT count(*) FROM items i WHERE i.job_id = j.job_id AND i.status::text = ANY(%s)),"
        " (SELECT count(*) FROM items i WHERE i.job_id = j.job_id AND i.status = 'confirmed')"
        " FROM jobs j WHERE j.request_id = %s", (TERMINAL_SQL, request_id)).fetchone()
    return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    items = int(os.environ.get("DEMO_ITEMS", "2000"))
    guids = int(os.environ.get("DEMO_GUIDS", "50"))
    senders = int(os.environ.get("DEMO_SENDERS", "2"))
    interval_ms = int(os.environ.get("DEMO_INTERVAL_MS", "20"))
    state = Path(os.environ.get("PACER_STATE_DIR", ".pacer")) / "demo"
    print(f"demo: starting Kafka, Postgres, the fake gateway and {senders + 2} services …", file=sys.stderr)
    inf = infra.up(state)
    stack = Stack(state, inf, env_extra={
        "PACER_SENDER_MIN_INTERVAL_MS": str(interval_ms),
        "PACER_SENDER_JITTER_MS": str(max(1, interval_ms // 2)),
        **{f"PACER_{svc}_LOG_LEVEL": "WARNING" for svc in ("PLANNER", "SENDER", "RECONCILER")},
    })
    ok = False
    try:
        prepare(inf.database_url, {"bootstrap.servers": inf.kafka_bootstrap}, stack.topic_prefix)
        # The gateway rejects a guid sent to faster than the interval: pacing is checked, not assumed.
        stack.start_gateway(min_interval_ms=max(1, interval_ms - 2))
        for kind in ("planner", "reconciler"):
            stack.start_service(kind)
        for n in range(senders):
            stack.start_service("sender", f"sender-{n + 1}")
        request_id = f"demo-{datetime.now(UTC):%Y%m%dT%H%M%S}-{os.getpid()}"
        body = json.dumps(build_request(request_id, items, guids)).encode()
        started = time.monotonic()
        produce_all(make_producer({"bootstrap.servers": inf.kafka_bootstrap}),
                    [(f"{stack.topic_prefix}.job-requests", request_id.encode(), body, None)])
        per_guid = -(-items // guids)
        deadline = started + 120 + per_guid * interval_ms * 3 / 1000 + items / 200
        with psycopg.connect(inf.database_url, autocommit=True) as conn, \
                tqdm(total=items, unit="item", desc="demo", file=sys.stderr) as bar:
            terminal = confirmed = 0
            while time.monotonic() < deadline:
                _, terminal, confirmed = progress(conn, request_id)
                bar.update(terminal - bar.n)
                if terminal >= items:
                    break
                time.sleep(0.2)
            elapsed = time.monotonic() - started
            total, terminal, confirmed = progress(conn, request_id)
        stats = gateway_stats(stack.gateway_url or "")
        duplicates = int(stats["duplicates"])
        delivered = int(stats["unique_keys"])
        # Lost: items that never reached a terminal state, or that Postgres calls confirmed
        # while the gateway has no record of them.
        lost = (items - terminal) + max(0, confirmed - delivered)
        print(f"demo: items={items} confirmed={confirmed} duplicates={duplicates} lost={lost} "
              f"elapsed={elapsed:.1f}s")
        ok = confirmed == items and duplicates == 0 and lost == 0 and total == items
        if not ok:
            print(f"demo: logs are in {state / 'logs'}", file=sys.stderr)
    finally:
        stack.stop_all()
        if ok:
            infra.destroy(state)
        else:
            infra.down(state)
    raise SystemExit(0 if ok else 1)
