"""Database-wide numbers the reconciler leader reads every sweep round (lock board,
governance, job progress), exported by the leader only: a standby exports none of them,
so a replica that stepped down never keeps an alert firing with numbers from its term."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# stats key → (metric name, help). Gauges: a level now.
GAUGES = {
    "running_items": ("pacer_reconciler_running_items", "Items claimed or submitted right now"),
    "expired_leases": ("pacer_reconciler_expired_leases",
                       "Guid and item leases held past their expiry (takeover pending)"),
    "guids_paused": ("pacer_reconciler_guids_paused",
                     "Guids paused (needs a person: offline, kicked, unauthorized, breaker, operator)"),
    "stalled_shards": ("pacer_reconciler_stalled_shards",
                       "Open shards of running jobs with no progress for stall_after_s"),
    "jobs_running": ("pacer_reconciler_jobs_running", "Jobs running (not paused, not finished)"),
}
# Totals kept in the database, all time: counters (``_total`` is added on exposition).
COUNTERS = {
    "takeovers": ("pacer_reconciler_guid_takeovers", "Guid leases taken over from another sender, all time"),
    "duplicate_intercepts": ("pacer_reconciler_duplicate_intercepts",
                             "Sends refused by the idempotency ledger, all time"),
    "retry_conflicts": ("pacer_reconciler_retry_conflicts",
                        "Manual retries refused because the item was executing, all time"),
    "forced_releases": ("pacer_reconciler_forced_releases",
                        "Guid leases force-released by an admin (holder evicted), all time"),
    "forced_item_releases": ("pacer_reconciler_forced_item_releases",
                             "Item leases force-released by an admin, all time"),
}
PAUSED_JOBS = {"jobs_paused_budget": "budget", "jobs_paused_breaker": "breaker", "jobs_paused_operator": "operator"}
ITEMS_PREFIX = "items:"  # "items:<status>" → items of open jobs in that status


class LeaderStats(Collector):
    def __init__(self, registry: CollectorRegistry, is_leader: Callable[[], bool]) -> None:
        self.is_leader = is_leader
        self.values: dict[str, int] = {}
        registry.register(self)

    def update(self, stats: Mapping[str, int]) -> None:
        self.values = dict(stats)

    def forget(self) -> None:
        self.values = {}

    def collect(self) -> Iterable[Metric]:
        values = self.values if self.is_leader() else {}
        for key, (name, doc) in GAUGES.items():
            if key in values:
                yield GaugeMetricFamily(name, doc, value=values[key])
        for key, (name, doc) in COUNTERS.items():
            if key in values:
                yield CounterMetricFamily(name, doc, value=values[key])
        paused = GaugeMetricFamily("pacer_reconciler_jobs_paused", "Jobs paused, by reason (budget, breaker, "
                                   "operator)", labels=["reason"])
        items = GaugeMetricFamily("pacer_reconciler_open_job_items", "Items of running and paused jobs, by status "
                                  "(job progress)", labels=["status"])
        for key, reason in PAUSED_JOBS.items():
            if key in values:
                paused.add_metric([reason], values[key])
        for key, n in sorted(values.items()):
            if key.startswith(ITEMS_PREFIX):
                items.add_metric([key[len(ITEMS_PREFIX):]], n)
        if values:
            yield paused
            yield items

    def describe(self) -> Iterable[Metric]:
        return []
