"""Every metric of the planner, declared in one place (docs/runbook.md's metric list is generated from it)."""

from __future__ import annotations

from typing import get_args

from prometheus_client import CollectorRegistry, Counter, Gauge

from pacer_planner.core import Handled
from pacer_planner.core.intake import Outcome


class IntakeMetrics:
    """What the intake loop counts."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("pacer_planner_requests_total", (
                "Job requests handled: `planned`; `duplicate` (already planned and dispatched: ignored); "
                "`redispatched` (stored earlier but its commands were not all published: published again); "
                "`dead_lettered` (invalid, unplannable, refused by the database, or an internal error: sent to "
                "the DLQ); `undispatched` (stored, but an internal error kept its commands from going out: its "
                "items are pending in Postgres)."
            ), ["outcome"], registry=registry)
        for outcome in get_args(Outcome):  # known outcomes start at 0, so boards see them before the first
            self.requests.labels(outcome)
        self.items = Counter("pacer_planner_items_total", "Items planned and dispatched.", registry=registry)
        self.environment = Counter("pacer_planner_environment_faults_total",
                                   (
                "Attempts at a job request that failed because Postgres or Kafka was unavailable; the same "
                "request is tried again with backoff, never dead-lettered. Rising steadily: intake is waiting for"
                " the database or the broker (see [outages](#postgres-and-kafka-outages))."
            ),
                                   registry=registry)
        self.internal = Counter("pacer_planner_internal_errors_total",
                                (
                "Attempts at a job request that failed with an unexpected error (a bug). After "
                "`PACER_PLANNER_INTERNAL_ATTEMPTS` the request is dead-lettered as `internal error: …` (or, if "
                "its job was stored, counted as `undispatched`). The planner's log has the traceback."
            ), registry=registry)

    def handled(self, result: Handled) -> None:
        self.requests.labels(result.outcome).inc()
        self.items.inc(result.items)

    def environment_fault(self) -> None:
        self.environment.inc()

    def internal_error(self) -> None:
        self.internal.inc()


class PagingMetrics:
    """What the requery pager counts."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pages = Counter("pacer_planner_target_pages_total", "Requery pages stored", registry=registry)
        self.targets = Counter("pacer_planner_targets_total", "Requery targets fetched, by what became of them",
                               ["result"], registry=registry)
        self.failures = Counter("pacer_planner_target_fetch_failures_total", "Failed requery page fetches",
                                registry=registry)
        self.paused = Counter("pacer_planner_target_pauses_total", "Requery jobs paused by the planner",
                              registry=registry)
        self.lost = Counter("pacer_planner_target_pages_lost_total",
                            "Requery pages fetched but not stored: another planner had taken the job meanwhile",
                            registry=registry)

    def page_stored(self, fetched: int, added: int, duplicates: int, invalid: int) -> None:
        self.pages.inc()
        for result, n in (("added", added), ("duplicate", duplicates), ("invalid", invalid)):
            self.targets.labels(result).inc(n)

    def fetch_failed(self) -> None:
        self.failures.inc()

    def job_paused(self) -> None:
        self.paused.inc()

    def page_lost(self) -> None:
        self.lost.inc()


class PlannerMetrics:
    """The planner's metrics in ``registry``; the gauge gets its function in ``main``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.intake = IntakeMetrics(registry)
        self.paging = PagingMetrics(registry)
        self.paging_jobs = Gauge("pacer_planner_paging_jobs", "Requery jobs being paged by this planner",
                                 registry=registry)
