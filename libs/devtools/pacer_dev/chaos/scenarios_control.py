"""Fault scenarios of operator control: forced releases of the guid leases of live senders."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from pacer_dev.chaos.harness import Scenario, close_scenario, open_scenario
from pacer_dev.infra import Infra

if TYPE_CHECKING:
    from pacer_dev.chaos.scenarios import Result, Size

# What the Control API's POST /guids/{guid}/release-lock runs (pacer_force_release_guid).
RELEASE = "SELECT outcome, previous_owner, evicted_until FROM pacer_force_release_guid(%s, 'chaos:admin', %s)"
LIVE = "SELECT guid FROM guid_leases WHERE owner IS NOT NULL AND lease_until > now() ORDER BY guid"
# The evicted holder holds the guid again before its released lease would have run out: the
# release was taken back (the fault this scenario guards against).
TAKEN_BACK = "SELECT count(*) FROM guid_leases WHERE guid = %s AND owner = %s AND now() < %s"


def _release_some(sc: Scenario, rng: random.Random, n: int) -> list[tuple[str, str, datetime]]:
    """Force-release up to ``n`` guid leases held by live senders: (guid, evicted owner, until)."""
    with psycopg.connect(sc.db, autocommit=True) as conn:
        live = [g for (g,) in conn.execute(LIVE).fetchall()]
        out = []
        for guid in rng.sample(live, k=min(n, len(live))):
            row = conn.execute(RELEASE, (guid, "chaos forced-release")).fetchone()
            if row is not None and row[0] == "done":
                out.append((guid, row[1], row[2]))
        return out


def _taken_back(sc: Scenario, released: list[tuple[str, str, datetime]]) -> int:
    with psycopg.connect(sc.db) as conn:
        counts: list[int] = [conn.execute(TAKEN_BACK, r).fetchone()[0] for r in released]
    return sum(counts)


def forced_release(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """Force-release guid leases of live senders again and again while a job runs, and add a
    sender half way so that released guids also move to a new owner. The evicted holder must
    stop sending for them (fenced) and must not take them back before its released lease would
    have run out; the gateway must see no guid sent to twice at once and no interval broken."""
    # Slower pacing than the other scenarios, so each guid has work while leases are released.
    sc = open_scenario("forced-release", inf, root, senders=2,
                       gateway={"latency_ms": 20, "latency_jitter_ms": 20},
                       env={"PACER_SENDER_MIN_INTERVAL_MS": "150"})
    try:
        sc.publish(size.items, size.guids)
        sc.wait_progress(0.05)
        forced = taken_back = 0
        started_third = False
        per_round = max(2, size.guids // 6)
        while sc.progress()[1] < sc.items * 0.85:
            released = _release_some(sc, rng, per_round)
            forced += len(released)
            time.sleep(rng.uniform(1.0, 2.5))  # chaos cadence: past the holders' next renewal
            taken_back += _taken_back(sc, released)
            if not started_third and sc.progress()[1] >= sc.items * 0.4:
                sc.stack.start_service("sender", "sender-3", wait=False)
                started_third = True
        done = sc.wait_done(size.timeout_s)
        figures = sc.measure()
        figures["completed"] = int(done)
        with psycopg.connect(sc.db) as conn:
            figures["evicted"] = int(conn.execute(
                "SELECT count(*) FROM audit_log WHERE action = 'release_lock' AND target_type = 'guid'"
                " AND NOT (before->>'expired')::boolean").fetchone()[0])
        figures["forced"] = forced
        figures["taken_back"] = taken_back
        # No service may have died of it (nothing in this scenario stops one on purpose).
        figures["exited"] = sum(1 for p in sc.stack.procs.values() if not p.alive())
        return figures, ("forced", "evicted", "taken_back", "exited", "guid_takeovers", "violations",
                         "max_guid_concurrency", "completed")
    finally:
        close_scenario(sc)



CONTROL_SCENARIOS: dict[str, Callable[[Infra, Path, Size, random.Random], Result]] = {
    "forced-release": forced_release,
}
