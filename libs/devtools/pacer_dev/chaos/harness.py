"""Run Pacer as real processes, break things, and check the outcome against two witnesses.

Every scenario publishes one job, disturbs the system while it runs, waits until every
item is final, then compares Postgres (what Pacer believes) with the fake gateway's
records (what was actually delivered): each idempotency key must be delivered at most
once, and an item may be confirmed only if its key was delivered. Postgres must also agree
with itself: each job's status, and the reconciler's projected counts, with the items.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, LiteralString

import psycopg

from pacer_common.domain.status import TERMINAL
from pacer_common.kafka import make_producer, produce_all
from pacer_dev.infra import Infra
from pacer_dev.infra.process import wait_for
from pacer_dev.stack import Stack, create_database, drop_database, prepare

# Short leases and timeouts so that takeovers and verification happen within seconds.
SERVICE_ENV = {
    "PACER_SENDER_MIN_INTERVAL_MS": "10",
    "PACER_SENDER_JITTER_MS": "10",
    "PACER_SENDER_LEASE_TTL_S": "6",
    "PACER_SENDER_GATEWAY_TIMEOUT_S": "1.5",
    "PACER_SENDER_RETRY_BASE_S": "0.2",
    "PACER_SENDER_MAX_ATTEMPTS": "12",
    "PACER_RECONCILER_SWEEP_INTERVAL_S": "0.5",
    "PACER_RECONCILER_VERIFY_AFTER_S": "2",
    "PACER_RECONCILER_VERIFY_DEADLINE_S": "20",
}
GATEWAY_MIN_INTERVAL_MS = 8  # below the senders' 10 ms: a faster send is a pacing violation
TERMINAL_VALUES = [s.value for s in TERMINAL]
# A job whose status disagrees with its items: completed with an item still open (its items
# would be held "job completed" for good), or running with every item final once the
# reconciler has caught up (a requery job still paging runs with nothing open, rightly).
JOBS_ASTRAY: LiteralString = """
SELECT count(*) FROM jobs j
WHERE j.request_id = ANY(%(rids)s)
  AND CASE j.status
      WHEN 'completed' THEN EXISTS (SELECT 1 FROM items i WHERE i.job_id = j.job_id
                                      AND i.status::text <> ALL(%(final)s))
      WHEN 'running' THEN NOT (j.target_mode = 'requery' AND j.target_complete_at IS NULL)
                          AND NOT EXISTS (SELECT 1 FROM items i WHERE i.job_id = j.job_id
                                            AND i.status::text <> ALL(%(final)s))
      ELSE false END
"""
# The reconciler's projection against the items: (shard, status) pairs whose projected count
# differs from the items table (a batch applied twice or skipped, a count bumped outside it).
PROJECTION_MISMATCH: LiteralString = """
WITH real AS (
    SELECT i.shard_id, i.status::text AS status, count(*) AS n
    FROM items i JOIN jobs j USING (job_id) WHERE j.request_id = ANY(%(rids)s)
    GROUP BY 1, 2
), projected AS (
    SELECT c.shard_id, c.status::text AS status, c.n
    FROM shard_status_counts c JOIN shards s USING (shard_id) JOIN jobs j USING (job_id)
    WHERE j.request_id = ANY(%(rids)s) AND c.n <> 0
)
SELECT count(*) FROM real r FULL JOIN projected p USING (shard_id, status) WHERE r.n IS DISTINCT FROM p.n
"""
# Deadlocks Postgres broke in the scenario's database (each scenario has its own): each was a
# unit of work run again, and two paths taking rows in opposite orders.
DEADLOCKS: LiteralString = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
# A transaction's fate by its 32-bit xid, in the current xid epoch.
XACT_STATUS: LiteralString = """
SELECT pg_xact_status((((pg_current_xact_id()::text::bigint >> 32) << 32) + %s::bigint)::text::xid8)
"""
POLL_S = 0.002  # a transaction caught in flight lasts milliseconds
SETTLE_S = 30.0  # the reconciler applies an item's last event and completes its job within seconds


@dataclass
class Scenario:
    """One scenario's running system."""

    name: str
    infra: Infra  # the real servers (restarts go through their state dir)
    stack: Stack
    request_id: str = ""
    items: int = 0
    notes: dict[str, Any] = field(default_factory=dict)
    also: list[str] = field(default_factory=list)  # more request ids counted with this one

    @property
    def request_ids(self) -> list[str]:
        return [self.request_id, *self.also]

    @property
    def db(self) -> str:
        return self.stack.infra.database_url

    # -- job --------------------------------------------------------------------------------
    def targets(self, items: int, guids: int) -> list[dict[str, Any]]:
        """``items`` targets over ``guids`` guids, round robin."""
        return [{"guid": f"{self.name}-g{i % guids:03d}", "to_id": f"room-{i:06d}", "vars": {"n": str(i)}}
                for i in range(items)]

    def publish(self, items: int, guids: int, copies: int = 1) -> str:
        """A job of ``items`` targets over ``guids`` guids, its request produced ``copies`` times."""
        return self.publish_targets({"mode": "snapshot", "items": self.targets(items, guids)}, items, copies)

    def publish_targets(self, targets: dict[str, Any], items: int, copies: int = 1) -> str:
        """A job request with this ``targets`` spec, expected to make ``items`` items."""
        rid = f"chaos-{self.name}-{uuid.uuid4().hex[:8]}"
        body = json.dumps({
            "request_id": rid, "kind": "campaign", "created_by": "chaos", "content_version": 1,
            "message": {"type": "text", "content": "Hello {n}"}, "targets": targets,
            "expire_at": (datetime.now(UTC) + timedelta(hours=2)).isoformat(),
        }).encode()
        produce_all(make_producer({"bootstrap.servers": self.infra.kafka_bootstrap}),
                    [(f"{self.stack.topic_prefix}.job-requests", rid.encode(), body, None)] * copies)
        self.request_id, self.items = rid, items
        return rid

    def progress(self) -> tuple[int, int]:
        """(items planned, items final) for the job, from Postgres; (0, 0) while unreachable."""
        try:
            with psycopg.connect(self.db, connect_timeout=3) as conn:
                row = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE i.status::text = ANY(%s)) FROM items i"
                    " JOIN jobs j USING (job_id) WHERE j.request_id = ANY(%s)", (TERMINAL_VALUES, self.request_ids)).fetchone()
        except psycopg.OperationalError:
            return 0, 0
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def wait_done(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            planned, final = self.progress()
            if planned >= self.items and final >= planned:
                return True
            time.sleep(0.5)
        return False

    def wait_progress(self, fraction: float, timeout_s: float = 120) -> None:
        """Block until this fraction of the job is final (to disturb it mid-run)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.progress()[1] < fraction * self.items:
            time.sleep(0.2)

    def wait_for_guid_takeover(self, timeout_s: float) -> None:
        """Block until some guid lease has been taken over from a silent owner."""
        self._wait_for_leases("SELECT coalesce(sum(takeovers), 0) FROM guid_leases", timeout_s)

    def wait_for_guid_handover(self, timeout_s: float) -> None:
        """Block until some guid lease has been taken again after its first owner (a rebalance
        handed the guid on), or the job is done."""
        self._wait_for_leases("SELECT coalesce(sum(greatest(epoch - 1, 0)), 0) FROM guid_leases", timeout_s)

    def _wait_for_leases(self, count: LiteralString, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.progress()[1] < self.items:
            with psycopg.connect(self.db) as conn:
                row = conn.execute(count).fetchone()
                if row and row[0]:
                    return
            time.sleep(0.5)

    # -- witnesses --------------------------------------------------------------------------
    def gateway(self, path: str, body: Any = None, method: str = "GET") -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.stack.gateway_url}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def disagreements(self, timeout_s: float = SETTLE_S) -> dict[str, int]:
        """What still disagrees with the items once the reconciler has had ``timeout_s`` to
        catch up: jobs astray (JOBS_ASTRAY) and projected counts (PROJECTION_MISMATCH)."""
        def count() -> dict[str, int]:
            args = {"rids": self.request_ids, "final": TERMINAL_VALUES}
            with psycopg.connect(self.db) as conn:
                return {name: int((conn.execute(sql, args).fetchone() or (0,))[0])
                        for name, sql in (("jobs_astray", JOBS_ASTRAY), ("projection_mismatch", PROJECTION_MISMATCH))}

        wait_for(lambda: not any(count().values()), timeout=timeout_s)
        return count()

    def measure(self) -> dict[str, int]:
        disagree = self.disagreements()
        with psycopg.connect(self.db) as conn:
            rows = conn.execute(
                "SELECT i.idem_key, i.status::text FROM items i JOIN jobs j USING (job_id) WHERE j.request_id = ANY(%s)",
                (self.request_ids,)).fetchall()
            events: dict[str, int] = dict(conn.execute(
                "SELECT e.type, count(*) FROM item_events e JOIN jobs j USING (job_id) WHERE j.request_id = ANY(%s)"
                " GROUP BY 1", (self.request_ids,)).fetchall())
            jobs = conn.execute("SELECT count(*) FROM jobs WHERE request_id = ANY(%s)", (self.request_ids,)).fetchone()[0]
            deadlocks = conn.execute(DEADLOCKS).fetchone()[0]
            guid_takeovers, handovers = conn.execute(
                "SELECT coalesce(sum(takeovers), 0), coalesce(sum(greatest(epoch - 1, 0)), 0)"
                " FROM guid_leases").fetchone() or (0, 0)
        delivered: Counter[str] = Counter()
        offset = 0
        while True:
            page = self.gateway(f"/_admin/sends?limit=5000&offset={offset}")
            if not page["sends"]:
                break
            delivered.update(s["idempotencyKey"] for s in page["sends"])
            offset += len(page["sends"])
        stats = self.gateway("/_admin/stats")
        statuses = Counter(status for _, status in rows)
        by_key: dict[str, set[str]] = {}
        for key, status in rows:
            by_key.setdefault(key, set()).add(status)
        keys = set(by_key)
        lost = sum(n for s, n in statuses.items() if s not in TERMINAL_VALUES)
        # Pacer says confirmed, but the gateway never got it; or the gateway got it, but no
        # item of that key is confirmed or waiting for a human.
        lost += sum(1 for k, st in by_key.items() if "confirmed" in st and delivered[k] == 0)
        lost += sum(1 for k, st in by_key.items() if delivered[k] > 0 and not st & {"confirmed", "unverified"})
        return {
            "items": self.items,
            "jobs": jobs,
            **disagree,
            "deadlocks": int(deadlocks or 0),
            "delivered_once": sum(1 for k in keys if delivered[k] == 1),
            "duplicates": sum(n - 1 for k, n in delivered.items() if k in keys and n > 1),
            "lost": lost,
            "unverified": statuses.get("unverified", 0),
            "failed": statuses.get("failed", 0),
            "abandoned": statuses.get("abandoned", 0),
            "takeovers": events.get("ItemLeaseExpired", 0) + events.get("ItemInDoubt", 0),
            "guid_takeovers": int(guid_takeovers),
            "guid_handovers": int(handovers),  # a guid's lease taken again after its first owner
            "verified": events.get("ItemVerifiedDelivered", 0) + events.get("ItemVerifiedNotDelivered", 0),
            "intercepts": events.get("ItemDuplicateIntercepted", 0),
            "violations": int(stats["interval_violations"]),
            "max_guid_concurrency": int(stats["max_concurrency_per_guid"]),
        }


def open_scenario(name: str, infra: Infra, root: Path, *, senders: int, gateway: dict[str, Any] | None = None,
                  env: dict[str, str] | None = None) -> Scenario:
    """A fresh database and topic prefix, the fake gateway and the services."""
    url = create_database(infra.database_url, f"chaos_{name}")
    state = root / url.rsplit("/", 1)[1]
    stack = Stack(state, Infra(infra.kafka_bootstrap, url, state), topic_prefix=f"c{uuid.uuid4().hex[:10]}",
                  env_extra={**SERVICE_ENV, **(env or {})})
    prepare(url, {"bootstrap.servers": infra.kafka_bootstrap}, stack.topic_prefix)
    stack.start_gateway(wait=False, min_interval_ms=GATEWAY_MIN_INTERVAL_MS, **(gateway or {}))
    stack.start_services("planner", "reconciler", *(("sender", f"sender-{n + 1}") for n in range(senders)))
    # Every sender in the group with partitions of its own before the job: a scenario's fault
    # on sender-1 then strikes a sender with guids, whichever one the group heard from first.
    names = [f"sender-{n + 1}" for n in range(senders)]
    if not wait_for(lambda: all((stack.metric(n, "pacer_sender_partitions_assigned") or 0) > 0 for n in names),
                    timeout=60):
        raise RuntimeError(f"{name}: the senders were not all given partitions within 60 s; see {state / 'logs'}")
    return Scenario(name, infra, stack)


def close_scenario(sc: Scenario) -> None:
    """Stop the scenario's services and drop its database, unless ``CHAOS_KEEP_DATABASES`` is
    set: then the database stays on the chaos Postgres for a look at what went wrong."""
    sc.stack.dispose()
    if os.environ.get("CHAOS_KEEP_DATABASES"):
        print(f"chaos {sc.name}: database kept: {sc.db}", flush=True)
        return
    with contextlib.suppress(psycopg.Error):
        drop_database(sc.db)


def line(name: str, fig: dict[str, int], extra: tuple[str, ...] = ()) -> str:
    head = " ".join(f"{k}={fig[k]}" for k in ("items", "delivered_once", "duplicates", "lost", "unverified"))
    head += "".join(f" {k}={fig[k]}" for k in ("jobs_astray", "projection_mismatch", "deadlocks")
                    if fig.get(k) and k not in extra)
    tail = " ".join(f"{k}={fig[k]}" for k in extra if k in fig)
    return f"chaos {name}: {head} {tail}".rstrip()


def first_row(conn: psycopg.Connection[tuple[object, ...]], query: LiteralString, args: tuple[object, ...],
              timeout_s: float) -> object | None:
    """The first column of ``query``'s first row once it is truthy, polled every ``POLL_S``
    (to catch a transaction in flight); None if it never is within ``timeout_s``."""
    seen: list[object] = []

    def found() -> bool:
        row = conn.execute(query, args).fetchone()
        if row is not None and row[0]:
            seen.append(row[0])
        return bool(seen)

    return seen[0] if wait_for(found, timeout=timeout_s, interval=POLL_S) else None


def xact_fate(conn: psycopg.Connection[tuple[object, ...]], xid: object, timeout_s: float) -> str:
    """Transaction ``xid``'s fate (``committed``, ``aborted``), once Postgres has noticed a
    killed client gone (``in progress`` until then)."""
    status: list[str] = []

    def known() -> bool:
        status[:] = [str(conn.execute(XACT_STATUS, (xid,)).fetchone()[0])]
        return status[0] != "in progress"

    wait_for(known, timeout=timeout_s, interval=POLL_S)
    return status[0]
