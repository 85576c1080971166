"""The fault scenarios. Each returns its figures; the runner prints and judges them."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from pacer_dev import infra as local_infra
from pacer_dev.chaos.harness import Scenario, close_scenario, open_scenario
from pacer_dev.chaos.scenarios_queue import retention_loss
from pacer_dev.infra import Infra


@dataclass(frozen=True)
class Size:
    items: int = 5000
    guids: int = 100
    kills: int = 20
    timeout_s: float = 600.0


Result = tuple[dict[str, int], tuple[str, ...]]


def _finish(sc: Scenario, size: Size) -> dict[str, int]:
    done = sc.wait_done(size.timeout_s)
    fig = sc.measure()
    fig["completed"] = int(done)
    return fig


def _kill_senders(sc: Scenario, size: Size, rng: random.Random, senders: int) -> int:
    """kill -9 a random sender again and again, a fresh one replacing it each time, until
    ``size.kills`` or the job is nine tenths done; returns the kills."""
    kills = 0
    spawned = senders
    while kills < size.kills and sc.progress()[1] < sc.items * 0.9:
        victim = rng.choice([n for n in sc.stack.procs if n.startswith("sender")])
        sc.stack.kill(victim)
        kills += 1
        spawned += 1
        sc.stack.start_service("sender", f"sender-{spawned}", wait=False)
        time.sleep(rng.uniform(0.3, 1.5))  # chaos cadence: the next kill lands anywhere
    return kills


def kill_sender(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """kill -9 a random sender again and again; a fresh one replaces it each time."""
    sc = open_scenario("kill-sender", inf, root, senders=3, gateway={"latency_ms": 20, "latency_jitter_ms": 30})
    try:
        # Enough work to outlast every kill (about one a second): CHAOS_KILLS=100 gets a longer job.
        sc.publish(max(size.items, size.kills * 120), size.guids)
        sc.wait_progress(0.02)
        kills = _kill_senders(sc, size, rng, 3)
        fig = _finish(sc, size)
        fig["kills"] = kills
        return fig, ("kills", "takeovers", "verified", "violations", "completed")
    finally:
        close_scenario(sc)


# Longer than a sender's lease (SERVICE_ENV: 6 s) and its takeover: a quiet the gateway asked
# of a killed sender's guid is still running when another sender takes the guid over.
QUIET_S = 10


def _answer_recorded(sc: Scenario, key: str | None, call: int) -> bool:
    """Whether Pacer recorded the gateway's 429 to the ``call``-th call of idempotency key
    ``key`` (in the scenario's jobs). Every call follows its item's ``ItemSubmitted``, written
    before it; so the answer to the ``call``-th is the item's event after its ``call``-th
    submit, recorded if that is a ``rate_limited`` retry. A sender that died with the answer
    leaves another event there (the item put in doubt), or none; a call with no key is judged."""
    if key is None:
        return True
    with psycopg.connect(sc.db) as conn:
        events = conn.execute(
            "SELECT e.type, e.payload->>'error_class' FROM item_events e JOIN items i USING (item_id)"
            " JOIN jobs j ON j.job_id = i.job_id WHERE i.idem_key = %s AND j.request_id = ANY(%s) ORDER BY e.seq",
            (key, sc.request_ids)).fetchall()
    submits = [n for n, (kind, _) in enumerate(events) if kind == "ItemSubmitted"]
    if len(submits) < call:
        return False
    after = submits[call - 1] + 1
    return after < len(events) and tuple(events[after]) == ("ItemRetryScheduled", "rate_limited")


def quiet_kills(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """The gateway rate-limits about one send in thirty with ``Retry-After: 10``, asking the guid
    for 10 s of quiet, while senders are killed again and again: every sender that takes a guid
    over must keep what is left of its quiet (the gateway counts each call inside one; before
    the lease rows kept the quiet, the short run counted 5).

    Only a quiet Pacer was told of can be kept: a sender killed after the gateway decided its
    429 and before the item's outcome was written took the quiet with it (no record holds it;
    the item is put in doubt and verified). A call inside such a quiet is counted apart
    (``quiets_unrecorded``): the answer that asked the quiet is one Pacer has no ``rate_limited``
    outcome of (the gateway names the call that asked it: its key, and which call of that key).
    A 429 whose outcome the sender could not record because another sender had taken the item
    over is counted there too, though that sender kept the quiet for its guid."""
    sc = open_scenario("quiet-kills", inf, root, senders=3,
                       gateway={"p_rate_limited": 0.03, "retry_after_s": QUIET_S, "seed": rng.randrange(1 << 30)})
    try:
        sc.publish(max(size.items, size.kills * 120), size.guids)
        sc.wait_progress(0.02)
        kills = _kill_senders(sc, size, rng, 3)
        fig = _finish(sc, size)
        stats = sc.gateway("/_admin/stats")
        unrecorded = sum(1 for v in stats["quiet_violated"] if not _answer_recorded(sc, v["key"], v["call"]))
        fig["kills"] = kills
        fig["quiets_asked"] = int(stats["quiet_asked"])
        fig["quiet_violations"] = int(stats["quiet_violations"]) - unrecorded
        fig["quiets_unrecorded"] = unrecorded
        return fig, ("kills", "quiets_asked", "quiet_violations", "quiets_unrecorded", "guid_takeovers", "violations",
                     "completed")
    finally:
        close_scenario(sc)


SCALE_GUID_SHARE_S = 20.0  # how long one guid's items take at the scenario's pace


def scale(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """Senders 1 → 3 → 1 while the job runs; pacing must hold across every handover.

    Paced slowly enough (each guid's share of the job lasts well past a group rebalance) that
    the growing group always hands guids on before the job is done."""
    per_guid = max(1, size.items // size.guids)
    interval_ms = max(10, int(SCALE_GUID_SHARE_S * 1000 / per_guid))
    sc = open_scenario("scale", inf, root, senders=1, env={"PACER_SENDER_MIN_INTERVAL_MS": str(interval_ms)})
    try:
        sc.publish(size.items, size.guids)
        sc.wait_progress(0.15)
        sc.stack.start_service("sender", "sender-2")
        sc.stack.start_service("sender", "sender-3")
        sc.wait_for_guid_handover(60)  # the group has rebalanced and guids moved, before it shrinks
        sc.wait_progress(0.5)
        sc.stack.stop("sender-2")
        sc.stack.stop("sender-3")
        fig = _finish(sc, size)
        return fig, ("guid_handovers", "violations", "max_guid_concurrency", "takeovers", "completed")
    finally:
        close_scenario(sc)


def zombie(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """SIGSTOP a sender past its leases, let others take over, then SIGCONT it."""
    sc = open_scenario("zombie", inf, root, senders=2, gateway={"latency_ms": 10})
    try:
        sc.publish(size.items, size.guids)
        sc.wait_progress(0.2)
        sc.stack.signal("sender-1", signal.SIGSTOP)
        ttl = float(sc.stack.env_extra["PACER_SENDER_LEASE_TTL_S"])
        # Frozen until the other sender has taken its guids over (group session timeout,
        # then lease expiry), and a lease TTL longer still; then it wakes up, stale.
        sc.wait_for_guid_takeover(timeout_s=ttl * 20)
        time.sleep(ttl)  # chaos timing: stay frozen well past its leases
        sc.stack.signal("sender-1", signal.SIGCONT)
        fig = _finish(sc, size)
        return fig, ("guid_takeovers", "takeovers", "verified", "violations", "max_guid_concurrency", "completed")
    finally:
        close_scenario(sc)


def kafka_restart(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    sc = open_scenario("kafka-restart", inf, root, senders=2)
    try:
        sc.publish(size.items, size.guids)
        sc.wait_progress(0.3)
        planned, final = sc.progress()
        local_infra.restart_kafka(inf.state_dir)
        fig = _finish(sc, size)
        fig["open_at_fault"] = planned - final  # the restart hit a job with work still open
        return fig, ("open_at_fault", "takeovers", "verified", "completed")
    finally:
        close_scenario(sc)


def postgres_restart(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    sc = open_scenario("postgres-restart", inf, root, senders=2)
    try:
        sc.publish(size.items, size.guids)
        sc.wait_progress(0.25)
        with psycopg.connect(sc.db, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                               " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()
        terminated = int(row[0]) if row else 0
        sc.wait_progress(0.5)
        planned, final = sc.progress()
        local_infra.restart_postgres(inf.state_dir)
        fig = _finish(sc, size)
        fig["terminated"] = terminated  # the services' connections cut before the restart
        fig["open_at_fault"] = planned - final
        return fig, ("terminated", "open_at_fault", "takeovers", "verified", "completed")
    finally:
        close_scenario(sc)


def gateway_faults(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """Every failure class at once, including delivered-then-response-lost and timeouts."""
    knobs = {"p_drop_after_accept": 0.03, "p_http_5xx": 0.03, "p_retryable": 0.05, "p_rate_limited": 0.05,
             "p_needs_human": 0.005, "p_bad_params": 0.005, "drop_hang_ms": 0, "seed": rng.randrange(1 << 30)}
    from pacer_dev.chaos.operator import resuming_paused_guids

    sc = open_scenario("gateway-faults", inf, root, senders=2, gateway=knobs)
    try:
        with resuming_paused_guids(sc) as resumed:
            sc.publish(size.items, size.guids)
            sc.wait_progress(0.5)
            # Half way, some dropped responses become timeouts instead of closed connections.
            sc.gateway("/_admin/config", {"drop_hang_ms": 2500}, method="PUT")
            fig = _finish(sc, size)
        fig["guids_resumed"] = resumed.get("done", 0)
        stats = sc.gateway("/_admin/stats")
        fig["dropped"] = int(stats["dropped_responses"])
        fig["rejected"] = sum(int(v) for v in stats["rejected_by_code"].values())
        return fig, ("failed", "dropped", "rejected", "guids_resumed", "verified", "intercepts", "completed")
    finally:
        close_scenario(sc)


def double_submit(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """The same request 10 times; concurrent manual retries of failed items; cancels racing claims."""
    from pacer_dev.chaos.operator import cancel_some, retry_failed

    sc = open_scenario("double-submit", inf, root, senders=2, gateway={"p_bad_params": 0.02, "seed": 7})
    try:
        sc.publish(size.items, size.guids, copies=10)
        sc.wait_progress(0.1)
        fig_cancel = cancel_some(sc, n=max(5, size.items // 100), rng=rng)
        sc.wait_progress(0.5)
        sc.gateway("/_admin/config", {"p_bad_params": 0.0}, method="PUT")
        sc.wait_done(size.timeout_s)
        fig_retry = retry_failed(sc, concurrency=10)
        fig = _finish(sc, size)
        fig.update(fig_cancel)
        fig.update(fig_retry)
        return fig, ("jobs", "cancelled", "retried", "retry_conflicts", "intercepts", "completed")
    finally:
        close_scenario(sc)


SCENARIOS: dict[str, Callable[[Infra, Path, Size, random.Random], Result]] = {
    "kill-sender": kill_sender,
    "quiet-kills": quiet_kills,
    "scale": scale,
    "zombie": zombie,
    "kafka-restart": kafka_restart,
    "postgres-restart": postgres_restart,
    "gateway-faults": gateway_faults,
    "double-submit": double_submit,
}
# The scenarios that stop and start the servers they are given, so the servers must be theirs
# alone: nothing else may be running on them (`make test` gives these servers of their own).
RESTARTS_SERVERS = frozenset({"kafka-restart", "postgres-restart"})

# Scenarios kept in modules of their own (they use this module's Size, Result and helpers).
from pacer_dev.chaos.scenarios_control import CONTROL_SCENARIOS  # noqa: E402
from pacer_dev.chaos.scenarios_intake import INTAKE_SCENARIOS  # noqa: E402
from pacer_dev.chaos.scenarios_reconciler import SCENARIOS as _RECONCILER  # noqa: E402

SCENARIOS["retention-loss"] = retention_loss
SCENARIOS.update(_RECONCILER)
SCENARIOS.update(CONTROL_SCENARIOS)
SCENARIOS.update(INTAKE_SCENARIOS)
from pacer_dev.chaos.scenarios_health import HEALTH_SCENARIOS  # noqa: E402

SCENARIOS.update(HEALTH_SCENARIOS)
from pacer_dev.chaos.scenarios_callbacks import CALLBACK_SCENARIOS  # noqa: E402

SCENARIOS.update(CALLBACK_SCENARIOS)
from pacer_dev.chaos.scenarios_restore import RESTORE_SCENARIOS  # noqa: E402

SCENARIOS.update(RESTORE_SCENARIOS)
from pacer_dev.chaos.scenarios_requery import REQUERY_SCENARIOS  # noqa: E402

SCENARIOS.update(REQUERY_SCENARIOS)
from pacer_dev.chaos.scenarios_planner import PLANNER_SCENARIOS  # noqa: E402

SCENARIOS.update(PLANNER_SCENARIOS)
