"""Snapshot job requests under planner kills: ``kill -9`` of the planner while a job's rows
are being written (the transaction open, rows written, not committed), and after a job is
stored but before its commands are marked dispatched."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, LiteralString

import psycopg

from pacer_dev.chaos.harness import close_scenario, first_row, open_scenario, xact_fate
from pacer_dev.infra import Infra

if TYPE_CHECKING:
    from pacer_dev.chaos.scenarios import Result, Size

PER_REQUEST = 500  # targets per request: a store long enough to be caught with its rows half written
# A planner transaction that has written rows (it has an xid) and is copying a job's items in.
STORING: LiteralString = """
SELECT backend_xid::text FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'pacer-planner'
  AND backend_xid IS NOT NULL AND query LIKE 'COPY items%%'
LIMIT 1
"""
UNDISPATCHED: LiteralString = """
SELECT count(*) FROM jobs WHERE request_id = ANY(%s) AND target_mode = 'snapshot' AND dispatched_at IS NULL
"""
TOTAL: LiteralString = "SELECT coalesce(sum(total), 0) FROM jobs WHERE request_id = ANY(%s)"
ITEMS: LiteralString = """
SELECT count(*) FROM items i JOIN jobs j USING (job_id) WHERE j.request_id = ANY(%s)
"""


def planner_kills(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """Snapshot job requests of 500 targets each, published at once; the planner is killed
    -9 again and again, a new one started each time: alternately while a job's items are
    being copied in (its transaction open with rows written: it must leave nothing behind),
    and once a job is stored but before it is marked dispatched (the job's request comes
    again and its commands must be produced again). Every request must become one job, all
    of it, every item sent once."""
    sc = open_scenario("planner-kills", inf, root, senders=2)
    try:
        wanted = max(2, size.kills // 5)
        # Every request waiting before a planner reads one, so none is planned unwatched.
        sc.stack.stop("planner")
        rids = [sc.publish(PER_REQUEST, size.guids) for _ in range(3 * wanted)]
        sc.stack.start_service("planner", "planner-1", wait=False)
        sc.request_id, sc.also, sc.items = rids[0], rids[1:], len(rids) * PER_REQUEST
        kills = mid_store = before_dispatch = 0
        with psycopg.connect(sc.db, autocommit=True) as conn:
            while kills < wanted:
                storing = kills % 2 == 0
                # A new planner joins the group once the killed one's session lapses (10 s).
                seen = first_row(conn, STORING, (), 60) if storing else first_row(conn, UNDISPATCHED, (rids,), 60)
                if seen is None:
                    break  # every request planned before the fault came round
                sc.stack.kill(next(n for n in sc.stack.procs if n.startswith("planner")))
                kills += 1
                if storing:  # Postgres rolls the transaction back once it sees the connection gone
                    mid_store += xact_fate(conn, seen, 30) == "aborted"
                else:
                    before_dispatch += bool(conn.execute(UNDISPATCHED, (rids,)).fetchone()[0])
                sc.stack.start_service("planner", f"planner-{kills + 2}", wait=False)
        done = sc.wait_done(size.timeout_s)
        fig = sc.measure()
        fig["completed"] = int(done)
        with psycopg.connect(sc.db) as conn:
            total = int(conn.execute(TOTAL, (rids,)).fetchone()[0])
            stored = int(conn.execute(ITEMS, (rids,)).fetchone()[0])
            undispatched = int(conn.execute(UNDISPATCHED, (rids,)).fetchone()[0])
        fig["requests"] = len(rids)
        fig["planner_kills"] = kills
        fig["killed_mid_store"] = mid_store
        fig["killed_before_dispatch"] = before_dispatch
        fig["targets_missing"] = len(rids) * PER_REQUEST - stored
        fig["totals_astray"] = total - stored  # a job's total must be its items, all or nothing
        fig["undispatched"] = undispatched  # a stored job's commands must end up produced and marked
        return fig, ("requests", "jobs", "planner_kills", "killed_mid_store", "killed_before_dispatch",
                     "targets_missing", "totals_astray", "undispatched", "completed")
    finally:
        close_scenario(sc)


PLANNER_SCENARIOS: dict[str, Callable[[Infra, Path, Size, random.Random], Result]] = {
    "planner-kills": planner_kills,
}
