"""Every metric of the reconciler, declared in one place (docs/runbook.md's metric list is generated from it)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

# Gauges the leader sets from the database every sweep round: locks (lock_counts.sql) and governance.
DATABASE_GAUGES = {
    "running_items": "Items `claimed` or `submitted` now.",
    "expired_leases": (
        "Guid leases and item leases held past their expiry. Item leases past expiry are swept within a round; "
        "the guid lease of a sender that died stays expired until another sender needs that guid, so a non-zero "
        "value alone is no incident."
    ),
    "takeovers": "Guid leases taken over from another sender, all time.",
    "duplicate_intercepts": "Sends refused by the idempotency ledger, all time.",
    "retry_conflicts": "Manual retries refused because the item was executing or already being retried, all time.",
    "forced_releases": (
        "Guid leases force-released by an admin, all time (each is in the audit log with who, when and why)."
    ),
    "forced_item_releases": "Item leases force-released by an admin, all time (each is in the audit log).",
    "jobs_paused_budget": "Jobs paused because their send budget is used up",
    "jobs_paused_breaker": "Jobs paused by a circuit breaker",
    "jobs_paused_operator": "Jobs paused by an operator",
    "guids_paused": "Guids paused (needs a person: offline, kicked, unauthorized, breaker, operator)",
    "stalled_shards": "Open shards of running jobs with no progress for stall_after_s",
}


class ReconcilerMetrics:
    """The reconciler's metrics in ``registry``; the leader gauges get their functions in ``main``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.events = Counter("pacer_reconciler_events_total", (
            "Events read from the log, published and projected."
        ), registry=registry)
        self.sweep_items = Counter("pacer_reconciler_sweep_items_total", (
            "Items moved by sweeps: `retry_due` (`waiting_retry` → `pending`, command re-published); "
            "`submit_expired` (`submitted` with an expired lease → `recovery_pending`); `claim_expired` "
            "(`claimed` with an expired lease → `pending`); `release_held` (held items whose hold was lifted, "
            "command re-published)."
        ), ["sweep"], registry=registry)
        self.sweep_errors = Counter("pacer_reconciler_sweep_errors_total", (
            "Sweep rounds that raised. The tail and the other sweeps carry on; see the alert below."
        ), ["sweep"], registry=registry)
        self.verifications = Counter("pacer_reconciler_verifications_total", (
            "In-doubt sends decided: `confirmed` (gateway found the send), `pending` (gateway proved no send: "
            "sent again), `unverified` (no answer within `PACER_RECONCILER_VERIFY_DEADLINE_S`)."
        ), ["result"], registry=registry)
        self.lookups = Counter("pacer_reconciler_lookups_total", (
            "Gateway delivery lookups: `found`, `not_found`, `unknown` (the gateway cannot say), `timeout` (cut "
            "off after `PACER_RECONCILER_VERIFY_TIMEOUT_S`), `error`. Only `found`/`not_found` decide an item."
        ), ["result"], registry=registry)
        self.bad_events = Counter("pacer_reconciler_bad_events_total", (
            "Rows skipped because they cannot be handled: `unreadable_event` (an event row that is not a valid "
            "event, e.g. an unknown type from a newer version), `bad_command` (a re-queued item whose command "
            "cannot be built), `unpublishable` (an outcome or command over `PACER_RECONCILER_MAX_MESSAGE_BYTES`),"
            " `unprocessable` (a row whose batch kept failing until it was alone, then failed alone 3 times: "
            "passed over without effect)."
        ), ["reason"], registry=registry)
        self.round_errors = Counter("pacer_reconciler_round_errors_total", (
            "Tail/sweep rounds that raised (database or Kafka down, a defect), by exception type; each is "
            "followed by a back-off, the service stays up."
        ), ["error"], registry=registry)
        self.trips = Counter("pacer_breaker_trips_total", (
            "Circuit breakers tripped (job or guid paused), by scope: `job` or `guid`."
        ), ["scope"], registry=registry)
        self.leader = Gauge("pacer_reconciler_leader", (
            "1 on the leader, 0 on standbys. A leader whose lease is older than its TTL reports 0 at once, even "
            "frozen-then-woken."
        ), registry=registry)
        self.leader_epoch = Gauge("pacer_reconciler_leader_epoch", (
            "The fencing epoch of this replica's lease (0 on a standby). It goes up by one at each takeover."
        ), registry=registry)
        self.tail_lag = Gauge("pacer_reconciler_tail_lag_seconds", (
            "Seconds since the leader last finished an event-tail round (0 on a standby). Below a second when "
            "healthy, whatever the gateway does; it grows while Postgres or Kafka is down."
        ), registry=registry)
        self.lookups_in_flight = Gauge("pacer_reconciler_lookups_in_flight", (
            "Lookups running now; at most `PACER_RECONCILER_VERIFY_CONCURRENCY`. Pinned at the maximum: the "
            "gateway is slow or hanging."
        ), registry=registry)
        self.gauges = {name: Gauge(f"pacer_{name}", help_, registry=registry)
                       for name, help_ in DATABASE_GAUGES.items()}
