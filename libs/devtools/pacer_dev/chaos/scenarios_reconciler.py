"""Reconciler faults: a gateway whose lookups hang, a leader that freezes, and a reconciler
killed with a batch's projection half written."""

from __future__ import annotations

import math
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, LiteralString

import psycopg

from pacer_dev.chaos.harness import TERMINAL_VALUES, close_scenario, first_row, open_scenario, xact_fate
from pacer_dev.infra import Infra

if TYPE_CHECKING:
    from pacer_dev.chaos.scenarios import Result, Size

LEADER_TTL_S = 4.0


def _poll(until: Callable[[], bool], every: Callable[[], None], timeout_s: float, period_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        every()
        if until():
            return True
        time.sleep(period_s)
    return False


def lookup_hang(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """Responses are dropped after delivery (items go in doubt) while every gateway lookup
    hangs; the event tail must keep up all the same. Then the gateway heals and the items in
    doubt are verified."""
    from pacer_dev.chaos.scenarios import _finish  # that module registers this one

    knobs = {"p_drop_after_accept": 0.05, "drop_hang_ms": 0, "lookup_delay_ms": 600_000,
             "seed": rng.randrange(1 << 30)}
    env = {"PACER_RECONCILER_VERIFY_TIMEOUT_S": "1", "PACER_RECONCILER_VERIFY_CONCURRENCY": "4",
           "PACER_RECONCILER_GATEWAY_TIMEOUT_S": "30", "PACER_RECONCILER_VERIFY_DEADLINE_S": "300"}
    sc = open_scenario("lookup-hang", inf, root, senders=2, gateway=knobs, env=env)
    lag = [0.0]

    def sample() -> None:
        v = sc.stack.metric("reconciler", "pacer_reconciler_tail_lag_seconds")
        lag[0] = max(lag[0], v or 0.0)

    def timeouts() -> float:
        return sc.stack.metric("reconciler", "pacer_reconciler_lookups_total", {"result": "timeout"}) or 0.0

    try:
        sc.publish(size.items, size.guids)
        # While lookups hang, everything but the items in doubt must become final: outcomes,
        # projection and re-dispatch go on without the gateway's answers.
        def rest_final() -> bool:
            with psycopg.connect(sc.db) as conn:
                planned, open_ = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE NOT i.status::text = ANY(%s))"
                    " FROM items i JOIN jobs j USING (job_id) WHERE j.request_id = %s",
                    ([*TERMINAL_VALUES, "recovery_pending"], sc.request_id)).fetchone() or (0, 0)
            return planned >= sc.items and open_ == 0 and timeouts() >= 8

        rest_done = _poll(rest_final, sample, timeout_s=size.timeout_s / 2)
        with psycopg.connect(sc.db) as conn:
            in_doubt = conn.execute("SELECT count(*) FROM items WHERE status = 'recovery_pending'").fetchone()[0]
        fig_timeouts = timeouts()
        sc.gateway("/_admin/config", {"lookup_delay_ms": 0}, method="PUT")
        _poll(lambda: sc.progress()[1] >= sc.items, sample, timeout_s=size.timeout_s / 2)
        fig = _finish(sc, size)
        fig["completed"] &= int(rest_done)
        fig["in_doubt_while_hung"] = int(in_doubt)
        fig["lookups_timed_out"] = int(fig_timeouts)
        fig["lookups_delayed"] = int(sc.gateway("/_admin/stats")["lookups_delayed"])
        fig["max_tail_lag_s"] = math.ceil(lag[0])
        return fig, ("max_tail_lag_s", "lookups_timed_out", "lookups_delayed", "in_doubt_while_hung", "verified",
                     "completed")
    finally:
        close_scenario(sc)


def frozen_leader(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """Two reconcilers sharing the segments; SIGSTOP the leader (the owner of segment 0, and of
    half the segments); the other must take its segments over within the lease TTL and one
    lease round; SIGCONT the old one, which must step down without applying a batch."""
    from pacer_dev.chaos.scenarios import _finish  # that module registers this one

    env = {"PACER_RECONCILER_LEADER_TTL_S": str(LEADER_TTL_S)}
    sc = open_scenario("frozen-leader", inf, root, senders=2, gateway={"latency_ms": 5}, env=env)
    try:
        sc.stack.start_service("reconciler", "reconciler-2")
        names = ("reconciler", "reconciler-2")

        def leader_of() -> str | None:
            return next((n for n in names if sc.stack.metric(n, "pacer_reconciler_leader") == 1.0), None)

        _poll(lambda: leader_of() is not None, lambda: None, timeout_s=30)
        old = leader_of() or "reconciler"
        new = next(n for n in names if n != old)
        sc.publish(size.items, size.guids)
        sc.wait_progress(0.1)
        sc.stack.signal(old, signal.SIGSTOP)
        frozen_at = time.monotonic()
        took_over = _poll(lambda: sc.stack.metric(new, "pacer_reconciler_leader") == 1.0, lambda: None,
                          timeout_s=LEADER_TTL_S * 10, period_s=0.05)
        failover_s = time.monotonic() - frozen_at
        sc.wait_progress(0.5)
        time.sleep(LEADER_TTL_S)  # chaos timing: the old leader stays frozen well past its term
        sc.stack.signal(old, signal.SIGCONT)
        stepped_down = _poll(lambda: sc.stack.metric(old, "pacer_reconciler_leader") == 0.0, lambda: None, timeout_s=30)
        fig = _finish(sc, size)  # projection_mismatch: the new leader projected every event once
        fig["failover_s"] = math.ceil(failover_s)
        fig["took_over"] = int(took_over)
        fig["old_stepped_down"] = int(stepped_down and sc.stack.metric(new, "pacer_reconciler_leader") == 1.0)
        # Informational: batches the woken old leader had in hand and the epoch fence refused.
        fig["old_batches_refused"] = Path(sc.stack.procs[old].log).read_text().count("expired or taken over")
        return fig, ("failover_s", "took_over", "old_stepped_down", "old_batches_refused", "projection_mismatch",
                     "completed")
    finally:
        close_scenario(sc)


SCENARIOS = {"lookup-hang": lookup_hang, "frozen-leader": frozen_leader}


# A reconciler's batch half applied: counts written, the cursor not yet moved, not committed.
APPLYING: LiteralString = """
SELECT backend_xid::text FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'pacer-reconciler' AND backend_xid IS NOT NULL
  AND (query LIKE 'INSERT INTO shard_status_counts%%' OR query LIKE '%%open_counts AS%%')
LIMIT 1
"""


def reconciler_kills(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """Jobs published one after another; while each is sent, the reconciler is killed -9 as
    soon as it has a batch's projection written but not committed (its counts and shards
    updated, the cursor not yet moved), and a new one started, which takes the segments over
    once the dead one's leases lapse. A batch must be applied once: the kill rolls it back
    whole and the next owner applies it again from the cursor. The projection must equal the
    items, and every job's status its items'."""
    from pacer_dev.chaos.scenarios import _finish  # that module registers this one

    env = {"PACER_RECONCILER_LEADER_TTL_S": str(LEADER_TTL_S)}
    sc = open_scenario("reconciler-kills", inf, root, senders=2, env=env)
    try:
        wanted = max(1, size.kills // 5)
        per_job = max(1000, size.items // wanted)
        rids: list[str] = []
        kills = mid_apply = 0
        with psycopg.connect(sc.db, autocommit=True) as conn:
            for _ in range(3 * wanted):  # a kill may land just after a commit: a few more jobs, never endless
                if mid_apply >= wanted:
                    break
                rids.append(sc.publish(per_job, size.guids))
                xid = first_row(conn, APPLYING, (), 60)
                if xid is None:
                    continue
                sc.stack.kill(next(n for n in sc.stack.procs if n.startswith("reconciler")))
                kills += 1
                mid_apply += xact_fate(conn, xid, 30) == "aborted"
                sc.stack.start_service("reconciler", f"reconciler-{kills + 1}", wait=False)
        sc.request_id, sc.also, sc.items = rids[0], rids[1:], len(rids) * per_job
        fig = _finish(sc, size)
        fig["reconciler_kills"] = kills
        fig["killed_mid_apply"] = mid_apply
        return fig, ("reconciler_kills", "killed_mid_apply", "projection_mismatch", "completed")
    finally:
        close_scenario(sc)


SCENARIOS["reconciler-kills"] = reconciler_kills
