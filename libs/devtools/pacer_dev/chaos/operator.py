"""Operator clicks, done concurrently on purpose: cancels racing claims, repeated retries."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import psycopg

from pacer_dev.chaos.harness import Scenario


def _items(sc: Scenario, status: str) -> list[str]:
    with psycopg.connect(sc.db) as conn:
        return [r[0] for r in conn.execute(
            "SELECT i.item_id::text FROM items i JOIN jobs j USING (job_id)"
            " WHERE j.request_id = %s AND i.status::text = %s", (sc.request_id, status))]


def _call(db: str, sql: str, *args: object) -> str:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(sql, args).fetchone()
        return str(row[0]) if row else ""


def cancel_some(sc: Scenario, n: int, rng: random.Random) -> dict[str, int]:
    """Cancel ``n`` items that are pending right now, while the senders are claiming them."""
    pending = _items(sc, "pending")
    chosen = rng.sample(pending, min(n, len(pending)))
    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = Counter(pool.map(
            lambda item: _call(sc.db, "SELECT outcome FROM pacer_cancel_item(%s, %s)", item, "chaos:operator"),
            chosen))
    return {"cancelled": outcomes.get("cancelled", 0), "cancel_too_late": outcomes.get("too_late", 0)}


def retry_failed(sc: Scenario, concurrency: int) -> dict[str, int]:
    """Press "retry" ``concurrency`` times at once on every failed item."""
    failed = _items(sc, "failed")
    calls = [item for item in failed for _ in range(concurrency)]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        outcomes = Counter(pool.map(
            lambda item: _call(sc.db, "SELECT outcome FROM pacer_retry_item(%s, %s)", item, "chaos:operator"),
            calls))
    # Compensation items are new items of the job: wait for them too.
    sc.items += outcomes.get("created", 0)
    return {"retried": outcomes.get("created", 0), "retry_conflicts": outcomes.get("conflict", 0)}


@contextmanager
def resuming_paused_guids(sc: Scenario, every_s: float = 1.0) -> Iterator[Counter[str]]:
    """An operator who brings accounts back: while the block runs, every guid paused, or held
    by a needs-human answer (offline, kicked, unauthorized), is resumed (as a person would
    after logging the account in again)."""
    stop = threading.Event()
    resumed: Counter[str] = Counter()

    def loop() -> None:
        while not stop.wait(every_s):
            with psycopg.connect(sc.db, autocommit=True) as conn:
                for (guid,) in conn.execute("SELECT guid FROM guid_leases WHERE paused_reason IS NOT NULL UNION"
                                            " SELECT guid FROM guid_states WHERE state <> 'online'").fetchall():
                    row = conn.execute("SELECT outcome FROM pacer_resume_guid(%s, 'chaos:operator')", (guid,)).fetchone()
                    resumed[row[0] if row else "none"] += 1

    t = threading.Thread(target=loop, name="chaos-operator", daemon=True)
    t.start()
    try:
        yield resumed
    finally:
        stop.set()
        t.join(timeout=10)
