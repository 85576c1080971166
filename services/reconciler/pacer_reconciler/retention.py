"""Time partitions kept up: created days ahead, given the grants of their partitioned table,
dropped past retention (every replica runs this; the database lets one at a time in). Each
change is logged; a partition kept past its
retention is logged with the reason, every run, until it goes; one that could not be made or
dropped (its CREATE, guard or DROP raised) is logged with the error and counted, and the run
goes on with the others (alert ``PacerPartitionMaintenanceFailing``). Then the rows of finished
jobs whose items have all gone with their partitions (the job, its shards, their counts and
target pages) are deleted: one row per job or shard, so these tables stay as bounded as the
items. Last, the days of tenant send counts past their retention (a row per tenant and day).

More often, a new period's partitions that fill before autovacuum reaches them get their
first statistics (``PartitionStats``)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable

from pacer_reconciler.core import run_rounds
from pacer_reconciler.domain.retention import PERIOD_SET, PartitionChange, Retention, tally
from pacer_reconciler.metrics import ReconcilerMetrics
from pacer_reconciler.ports import Partitions

log = logging.getLogger("pacer.reconciler.retention")


class PartitionKeeper:
    def __init__(self, partitions: Partitions, retention: Retention, ahead_days: int,
                 m: ReconcilerMetrics, period_days: int = 7) -> None:
        self.partitions = partitions
        self.retention = retention
        self.ahead_days = ahead_days
        self.period_days = period_days  # of the partitions of items and their events made from now on
        self.m = m
        for table, days in retention.by_table().items():
            m.maintenance_days.labels(table, "retain").set(days)
        m.maintenance_days.labels("tenant_usage", "retain").set(retention.usage_days)
        for table in PERIOD_SET:
            m.maintenance_days.labels(table, "period").set(period_days)
        for table in retention.by_table():
            m.partitions.labels(table, "failed")  # 0 from the start: the alert sees the first failure

    async def round(self) -> int:
        """One run: the period of items and their events set, partitions created, then pruned,
        then the jobs whose items went. Returns the partitions created or dropped."""
        for table, was in await self.partitions.set_period(PERIOD_SET, self.period_days):
            log.info("partitions of %s made from now on hold %s each (were %s); those made already keep "
                     "theirs", table, _days(self.period_days), _days(was),
                     extra={"table": table, "period_days": self.period_days, "was": was})
        changes = [*await self.partitions.ensure(self.ahead_days),
                   *await self.partitions.prune(self.retention.by_table())]
        for c in changes:
            _log(c)
        counts = tally(changes)
        for (table, action), n in counts.items():
            if action in ("created", "dropped", "skipped", "granted", "failed"):
                self.m.partitions.labels(table, action).inc(n)
        for table in self.retention.by_table():
            self.m.partitions_kept.labels(table).set(counts[(table, "kept")])
            self.m.default_partition_rows.labels(table).set(1 if counts[(table, "default")] else 0)
        jobs = await self.partitions.prune_jobs(self.retention.items_days)
        if jobs:
            log.info("%d finished jobs past retention deleted (their items had gone)", jobs, extra={"jobs": jobs})
            self.m.jobs_pruned.inc(jobs)
        usage = await self.partitions.prune_usage(self.retention.usage_days)
        if usage:
            log.info("%d days of tenant send counts past retention deleted", usage, extra={"rows": usage})
            self.m.usage_pruned.inc(usage)
        senders = await self.partitions.prune_senders()
        if senders:
            log.info("the pacing defaults of %d senders gone for a day deleted", senders, extra={"rows": senders})
        return sum(n for (_, action), n in counts.items() if action in ("created", "dropped"))

    async def run(self, every_s: float, stop: asyncio.Event, backoff_max_s: float) -> None:
        await run_rounds(self.round, stop, every_s, backoff_max_s, self.m.count_round_error)


class PartitionStats:
    """A partition of a new period is planned without statistics until autovacuum analyzes it,
    and autovacuum can be late: its workers busy with the large partitions of the periods
    before. Planned blind, a statement can pick a plan that reads every queued item; planned
    from statistics taken while the partition was empty (an ANALYZE of the whole database
    reaches the empty partitions of the days ahead), one that scans it. Each run analyzes the
    partitions never analyzed, or analyzed empty and holding live rows since, that hold
    ``min_bytes`` (below that any plan is cheap), once each: autovacuum keeps their
    statistics after that."""

    def __init__(self, partitions: Partitions, m: ReconcilerMetrics, tables: Iterable[str],
                 min_bytes: int = 1 << 20) -> None:
        self.partitions = partitions
        self.m = m
        self.tables = set(tables)  # the partitioned tables: each has a series, 0 while all is well
        self.min_bytes = min_bytes
        self.refused: set[str] = set()  # partitions this user may not analyze: said once each
        for table in self.tables:
            m.partitions_without_statistics.labels(table).set(0)

    async def round(self) -> int:
        results = await self.partitions.analyze_new(self.min_bytes, self.refused)
        if results is None:
            return 0  # another replica is at it
        analyzed = 0
        self.refused &= {a.partition for a in results}  # analyzed by their owner since, or gone
        without = Counter(a.table for a in results if not a.done)
        for table in self.tables | without.keys():
            self.m.partitions_without_statistics.labels(table).set(without[table])
        for a in results:
            extra = {"partition": a.partition, "bytes": a.bytes}
            if a.done:
                log.info("partition %s analyzed: it held %d bytes and had no statistics of its rows yet", a.partition, a.bytes,
                         extra=extra | {"action": "analyzed"})
                self.m.partitions.labels(a.table, "analyzed").inc()
                analyzed += 1
            elif a.partition not in self.refused:
                self.refused.add(a.partition)
                log.warning("partition %s has no statistics and this database user may not ANALYZE it (it must own "
                            "the table, or hold MAINTAIN on PostgreSQL 17 and later): analyze it as its owner, or grant "
                            "MAINTAIN on its partitioned table (docs/runbook.md#pacerpartitionwithoutstatistics)",
                            a.partition, extra=extra | {"action": "not_analyzed"})
                self.m.partitions.labels(a.table, "not_analyzed").inc()
        return analyzed

    async def run(self, every_s: float, stop: asyncio.Event, backoff_max_s: float) -> None:
        await run_rounds(self.round, stop, every_s, backoff_max_s, self.m.count_round_error)


def _days(n: int) -> str:
    return f"{n} day" if n == 1 else f"{n} days"


def _log(c: PartitionChange) -> None:
    extra = {"partition": c.partition, "action": c.action, "detail": c.detail}
    if c.action in ("created", "dropped", "granted"):
        log.info("partition %s %s%s", c.partition, c.action, f": {c.detail}" if c.detail else "", extra=extra)
    elif c.action == "kept":
        log.info("partition %s is past retention and kept: %s", c.partition, c.detail, extra=extra)
    elif c.action == "failed":
        log.error("partition %s %s; the other partitions and the rest of the maintenance go on, and it is tried "
                  "again next run (docs/runbook.md#pacerpartitionmaintenancefailing)", c.partition, c.detail,
                  extra=extra)
    elif c.action == "default":
        log.warning("the default partition %s holds rows (from before partitioning, or of a period whose "
                    "partition was missing): docs/runbook.md, \"Retention\"", c.partition, extra=extra)
    else:
        log.warning("partition %s %s: %s", c.partition, c.action, c.detail, extra=extra)
