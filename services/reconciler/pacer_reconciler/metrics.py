"""Every metric of the reconciler, declared in one place (docs/runbook.md's metric list is
generated from it). The database-wide numbers the leader (the owner of segment 0) reads every
sweep round (lock board, governance, job progress) are exported by it only: the others export none,
so a replica that stepped down never keeps an alert firing with numbers from its term."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# stats key → (metric name, help). Gauges: a level now.
GAUGES = {
    "running_items": ("pacer_reconciler_running_items", "Items claimed or submitted right now"),
    "expired_leases": ("pacer_reconciler_expired_leases",
                       "Guid and item leases held past their expiry (takeover pending)"),
    "guids_paused": ("pacer_reconciler_guids_paused",
                     "Guids paused by a breaker or an operator (lifecycle holds: pacer_reconciler_guids_by_state)"),
    "guids_slowed": ("pacer_reconciler_guids_slowed",
                     "Guids a live lease holder paces at a rate-limit penalty (the gateway rate-limited them "
                     "lately, or left a send unanswered), as the holder last wrote it"),
    "guids_quiet": ("pacer_reconciler_guids_quiet",
                    "Guids keeping a quiet the gateway asked of them (a rate limit's Retry-After, on a send or a "
                    "lookup): no send and no lookup of them is made until it ends; the Guids page shows when"),
    "in_doubt_quiet": ("pacer_reconciler_in_doubt_quiet_items",
                       "In-doubt items of guids keeping a gateway's quiet: not looked up until it ends (decided "
                       "without a lookup once in doubt an hour, unless at most a minute of the quiet is left). "
                       "Counted with the stalled shards, every "
                       "stall_count_every_s"),
    "stalled_shards": ("pacer_reconciler_stalled_shards",
                       "Open shards of running jobs with no progress for stall_after_s beyond their guid's longest gap, "
                       "not held by its quiet hours or a send window's cap"),
    "jobs_running": ("pacer_reconciler_jobs_running", "Jobs running (not paused, not finished)"),
    # A count of the events still kept, not a counter: retention drops item_events' partitions
    # and it falls with them (a counter that falls reads as a reset). All replicas share it.
    "duplicate_intercepts": ("pacer_reconciler_duplicate_intercepts_kept",
                             "Sends refused by the idempotency ledger among the item events still kept "
                             "(`PACER_RECONCILER_RETAIN_ITEMS_DAYS`): it falls when retention drops a partition. "
                             "The rate of intercepts: `pacer_sender_items_total{outcome=\"duplicate\"}`"),
}
# Totals kept in the database, all time: counters (``_total`` is added on exposition).
COUNTERS = {
    "takeovers": ("pacer_reconciler_guid_takeovers", "Guid leases taken over from another sender, all time"),
    "retry_conflicts": ("pacer_reconciler_retry_conflicts",
                        "Manual retries refused because the item was executing, all time"),
    "forced_releases": ("pacer_reconciler_forced_releases",
                        "Guid leases force-released by an admin (holder evicted), all time"),
    "forced_item_releases": ("pacer_reconciler_forced_item_releases",
                             "Item leases force-released by an admin, all time"),
}
PAUSED_JOBS = {"jobs_paused_budget": "budget", "jobs_paused_breaker": "breaker", "jobs_paused_operator": "operator"}
ITEMS_PREFIX = "items:"  # "items:<status>" → items of open jobs in that status
GUIDS_PREFIX = "guids:"  # "guids:<state>" → guids in that lifecycle state
WORK_PREFIX = "guids_with_work:"  # "guids_with_work:<state>" → those of them with queued items
SENDS_PREFIX = "tenant_sends:"  # "tenant_sends:<tenant>" → a tenant's sends of its today
QUOTA_PREFIX = "tenant_quota:"  # "tenant_quota:<tenant>" → its sends_per_day


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
        states = GaugeMetricFamily("pacer_reconciler_guids_by_state", "Guids by lifecycle state (`online`, "
                                   "`offline`, `kicked`, `unauthorized`); any but `online` holds the guid's queue "
                                   "(alert `PacerGuidHeld`). No guid label: `GET /api/v1/guids?state=…` names them. "
                                   "Counted every `PACER_RECONCILER_STALL_COUNT_EVERY_S`", labels=["state"])
        waiting = GaugeMetricFamily("pacer_reconciler_held_guids_with_work", "Guids in each lifecycle state but "
                                    "`online` that have queued items (pending or waiting to retry): work held back "
                                    "(alert `PacerGuidHeld`). Counted every `PACER_RECONCILER_STALL_COUNT_EVERY_S`",
                                    labels=["state"])
        sends = GaugeMetricFamily("pacer_reconciler_tenant_sends_today", "Sends of each tenant with a daily quota "
                                  "on its today: its calendar day in its `timezone`, else in the senders' (alert "
                                  "`PacerTenantQuotaUsed`)", labels=["tenant"])
        quota = GaugeMetricFamily("pacer_reconciler_tenant_sends_per_day", "Each tenant's daily quota "
                                  "(`sends_per_day`), for tenants that have one", labels=["tenant"])
        families = {ITEMS_PREFIX: items, GUIDS_PREFIX: states, WORK_PREFIX: waiting, SENDS_PREFIX: sends,
                    QUOTA_PREFIX: quota}
        for key, n in sorted(values.items()):
            for prefix, family in families.items():
                if key.startswith(prefix):
                    family.add_metric([key[len(prefix):]], n)
        if values:
            yield paused
            yield from families.values()

    def describe(self) -> Iterable[Metric]:
        return []


class ReconcilerMetrics:
    """The reconciler's metrics in ``registry``; the gauges get their functions in ``main``, and
    the database-wide numbers are the leader's alone (:class:`LeaderStats`)."""

    def __init__(self, registry: CollectorRegistry, is_leader: Callable[[], bool] = lambda: False) -> None:
        self.leader_stats = LeaderStats(registry, is_leader)
        self.events = Counter("pacer_reconciler_events_total", (
            "Events read from the log, published and projected."
        ), registry=registry)
        self.sweep_items = Counter("pacer_reconciler_sweep_items_total", (
            "Items moved by sweeps: `retry_due` (`waiting_retry` → `pending`, command re-published); "
            "`submit_expired` (`submitted` with an expired lease → `recovery_pending`); `claim_expired` "
            "(`claimed` with an expired lease → `pending`); `expire_due` (`pending` or `waiting_retry` past its "
            "`expire_at` → `expired`, `ItemExpired`: items no worker reached, their guid, job or shard held); "
            "`release_held` (held items whose hold was lifted, command re-published)."
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
            "off after `PACER_RECONCILER_VERIFY_TIMEOUT_S`), `error`; and `quiet`: the gateway asked the item's "
            "guid for quiet with a rate limit (`Retry-After`): a lookup it refused so, one the reconciler did not "
            "make while that quiet lasts, or an item decided without one after an hour in doubt with its guid still "
            "quiet for more than a minute. The items of a guid whose lease row keeps a quiet (`guid_leases.gateway_quiet_until`) are not "
            "read at all meanwhile, so not counted here: `pacer_reconciler_in_doubt_quiet_items` counts them. "
            "Only `found`/`not_found` decide an item."
        ), ["result"], registry=registry)
        self.verifier_errors = Counter("pacer_reconciler_verifier_errors_total", (
            "Verification steps that raised (database down, a defect), by `step`: `read` (a round's read of the "
            "in-doubt items: no lookup starts), `resolve` (an item's outcome not written: it stays "
            "`recovery_pending` and is asked again next round), `quiet` (a quiet the gateway asked of a lookup's "
            "guid not written to its lease row: the guid's senders do not know of it; the lookups keep it). The "
            "verify deadline is applied by the resolution itself, so while `read` or `resolve` keeps failing no "
            "item is decided, not even `unverified` (alert `PacerReconcilerVerifierFailing`)."
        ), ["step"], registry=registry)
        self.bad_events = Counter("pacer_reconciler_bad_events_total", (
            "Rows skipped because they cannot be handled: `unreadable_event` (an event row that is not a valid "
            "event, e.g. an unknown type from a newer version), `bad_command` (a re-queued item whose command "
            "cannot be built), `unpublishable` (an outcome or command over `PACER_RECONCILER_MAX_MESSAGE_BYTES`),"
            " `unprocessable` (a row whose batch kept failing until it was alone, then failed alone 3 times: "
            "passed over without effect), `bad_callback` (a gateway callback that cannot be read or handled)."
        ), ["reason"], registry=registry)
        self.callbacks = Counter("pacer_reconciler_callbacks_total", (
            "Gateway callbacks consumed (every replica), by `cmd` (`device.status`, `media.ready`, `other`) and "
            "`result`: `applied` (the guid's state changed; the media became ready or failed), `stale` (older than, or "
            "the same as, what is known, or a media already settled or unknown: nothing changed), `foreign` (a guid "
            "another tenant's job named: the callback's tenant may not change it; logged), `ignored` (not "
            "Pacer's to act on), `bad` (unreadable or failed: skipped, also in "
            "`pacer_reconciler_bad_events_total{reason=\"bad_callback\"}`)."
        ), ["cmd", "result"], registry=registry)
        self.round_errors = Counter("pacer_reconciler_round_errors_total", (
            "Rounds that raised (database or Kafka down, a defect): a segment's tail (that segment backs off, the "
            "others and the sweeps go on), the partition maintenance, the callbacks; and reads of the leader's "
            "database-wide numbers that failed, by exception type; each is followed by a back-off, the service "
            "stays up."
        ), ["error"], registry=registry)
        self.leader_stats_age = Gauge("pacer_reconciler_leader_stats_age_seconds", (
            "Seconds since the leader last read all its database-wide numbers (lock board, guids, jobs, stalled "
            "shards, tenants' sends), or since it became the leader if it never did; 0 on the other replicas. "
            "A few sweep intervals when healthy; it grows while those reads fail, and meanwhile the numbers "
            "exported are the last read (alert `PacerReconcilerLeaderStatsStale`)."
        ), registry=registry)
        self.partitions = Counter("pacer_reconciler_partitions_total", (
            "Time partitions created (ahead of their days), dropped (past retention), skipped (their table "
            "was locked: tried again next run), failed (past retention, and their guard or DROP raised, e.g. a "
            "statement timeout, an object that depends on them, a DROP the database user may not do: logged with the "
            "error, tried again next run; the other partitions go on; alert `PacerPartitionMaintenanceFailing`), "
            "granted (given a grant of their partitioned table that they "
            "lacked: one per partition and grantee), analyzed (given their first statistics before autovacuum "
            "reached them: `PACER_RECONCILER_ANALYZE_EVERY_S`) and not_analyzed (the database user may not "
            "ANALYZE them: logged once, left to their owner), by table."
        ), ["table", "action"], registry=registry)
        self.partitions_without_statistics = Gauge("pacer_reconciler_partitions_without_statistics", (
            "Time partitions holding 1 MiB or more that were never analyzed (or only while empty) and that the reconcilers' database "
            "user may not ANALYZE (only their owner, or MAINTAIN on PostgreSQL 17 and later), by table, as of the last check "
            "(alert `PacerPartitionWithoutStatistics`)."
        ), ["table"], registry=registry)
        self.partitions_kept = Gauge("pacer_reconciler_partitions_kept", (
            "Partitions past retention kept at the last maintenance run, by table: they still hold unfinished "
            "items, events a reconciler has not applied, or ledger keys whose items are kept (the log says which)."
        ), ["table"], registry=registry)
        self.default_partition_rows = Gauge("pacer_reconciler_default_partition_rows", (
            "1 where a table's default partition holds rows: rows from before partitioning, or of a period whose "
            "partition was missing (alert `PacerDefaultPartitionFilling`; docs/runbook.md, \"Retention\")."
        ), ["table"], registry=registry)
        self.maintenance_days = Gauge("pacer_reconciler_maintenance_days", (
            "This replica's maintenance settings, by table and setting: `retain` (days the table's rows are kept, "
            "`PACER_RECONCILER_RETAIN_*`) and `period` (days each new partition of items and item_events holds, "
            "`PACER_RECONCILER_PARTITION_PERIOD_DAYS`). Every replica runs the maintenance, so replicas set apart undo "
            "each other's: the shortest retention prunes for all, the period switches at each run (alert "
            "`PacerReconcilerSettingsDiffer`)."
        ), ["table", "setting"], registry=registry)
        self.jobs_pruned = Counter("pacer_reconciler_jobs_pruned_total", (
            "Finished jobs deleted past the items' retention, once all their items had gone with their partitions "
            "(with their shards, shard counts and target pages)."
        ), registry=registry)
        self.usage_pruned = Counter("pacer_reconciler_usage_rows_pruned_total", (
            "Days of per-tenant send counts (`tenant_usage` rows) deleted past `PACER_RECONCILER_RETAIN_USAGE_DAYS`."
        ), registry=registry)
        self.trips = Counter("pacer_reconciler_breaker_trips_total", (
            "Circuit breakers tripped (job or guid paused), by scope: `job` or `guid`."
        ), ["scope"], registry=registry)
        self.leader = Gauge("pacer_reconciler_leader", (
            "1 on the replica that holds segment 0 (it also runs the duties that are not per guid: released "
            "holds, backlog and database-wide gauges), 0 on the others. A lease older than its TTL counts as not "
            "held at once, even frozen-then-woken."
        ), registry=registry)
        self.leader_epoch = Gauge("pacer_reconciler_leader_epoch", (
            "The fencing epoch of this replica's lease of segment 0 (0 if it does not hold it). It goes up by one "
            "at each takeover."
        ), registry=registry)
        self.segments_owned = Gauge("pacer_reconciler_segments_owned", (
            "Segments this replica holds now (of `PACER_RECONCILER_SEGMENTS`); summed over replicas it is the "
            "segment count once failover settles."
        ), registry=registry)
        self.segments = Gauge("pacer_reconciler_segments", (
            "The segment count this replica runs with (`PACER_RECONCILER_SEGMENTS`); alert "
            "`PacerReconcilerSegmentsUnowned` compares the segments held with it."
        ), registry=registry)
        self.replicas = Gauge("pacer_reconciler_replicas", (
            "Live reconciler replicas this one counts when it shares out the segments (itself included)."
        ), registry=registry)
        self.tail_lag = Gauge("pacer_reconciler_tail_lag_seconds", (
            "Seconds since the segment of this replica furthest behind last finished a tail round (0 while it holds "
            "none). Below a second when healthy, whatever the gateway does; it grows while Postgres or Kafka is "
            "down, or while one segment's tail keeps failing."
        ), registry=registry)
        self.events_held_back = Gauge("pacer_reconciler_events_held_back_seconds", (
            "How long the first committed event no tail can read yet has waited: a tail reads only below the "
            "oldest transaction still running on the Postgres server, in any of its databases. Below a second "
            "when healthy; it grows while some transaction that wrote anything stays open (alert "
            "`PacerReconcilerEventsHeldBack`). Leader only (0 on a standby), every `PACER_RECONCILER_BACKLOG_EVERY_S`."
        ), registry=registry)
        self.lookups_in_flight = Gauge("pacer_reconciler_lookups_in_flight", (
            "Lookups running now; at most `PACER_RECONCILER_VERIFY_CONCURRENCY`. Pinned at the maximum: the "
            "gateway is slow or hanging."
        ), registry=registry)
        self.backlog_top = Gauge("pacer_reconciler_guid_backlog_top", (
            "Queued items (ready or scheduled; held work left out: a paused job, shard or guid, a guid not online) of the top-N guids by "
            "backlog (`PACER_RECONCILER_BACKLOG_TOP_N`); rank 1 is the deepest. Leader only, replaced every "
            "`PACER_RECONCILER_BACKLOG_EVERY_S`: at most N series, never one per guid. `GET /backlog` (or the "
            "console's *Guids* page, most queued first) lists more."
        ), ["rank", "guid"], registry=registry)
        self.wait_top = Gauge("pacer_reconciler_guid_wait_top_seconds", (
            "How long the oldest ready item has waited, for the top-N guids by wait; rank 1 is the longest. "
            "Leader only, as `pacer_reconciler_guid_backlog_top`."
        ), ["rank", "guid"], registry=registry)
        job_labels = ["rank", "job_id", "kind", "tenant", "status"]
        self.job_left_top = Gauge("pacer_reconciler_job_items_left_top", (
            "Items not yet in a final status of the top-N open jobs (running or paused) by items left "
            "(`PACER_RECONCILER_BACKLOG_TOP_N`); rank 1 has the most. A requery job counts the pages fetched so "
            "far. Leader only, replaced every `PACER_RECONCILER_BACKLOG_EVERY_S`: at most N series, never one per "
            "job. `GET /api/v1/jobs/{job_id}` (or the console's *Jobs* page) has every job's counts."
        ), job_labels, registry=registry)
        self.job_done_top = Gauge("pacer_reconciler_job_done_ratio_top", (
            "Share of the job's items in a final status (confirmed, failed, expired, abandoned, unverified), for "
            "the same top-N open jobs as `pacer_reconciler_job_items_left_top`, with the same labels."
        ), job_labels, registry=registry)

    def count_round_error(self, error: str, n: int) -> None:
        """``n`` rounds failed with ``error`` (an exception type's name)."""
        self.round_errors.labels(error).inc(n)
