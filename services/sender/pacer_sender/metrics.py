"""Every metric of the sender, declared in one place (docs/runbook.md's metric list is generated from it)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class SenderMetrics:
    """The sender's metrics in ``registry``; the gauges get their functions in ``main``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.executed = Counter("pacer_sender_items_total", (
            "Items executed: `confirmed`; `retry` (scheduled again: `waiting_retry`); `failed`; `in_doubt` (→ "
            "`recovery_pending`); `rate_limited` (rescheduled, guid slowed down); `expired`; `duplicate` "
            "(idempotency key held by another item: abandoned); `not_pending` (a redelivered command for an item "
            "already taken or finished: no-op); `fenced` (gateway answered but the lease had been taken over: "
            "outcome not recorded, the item is verified instead); `guid_lost` (this sender no longer holds the "
            "guid's lease: put back); `deadline_missed` (too long between claim and gateway call: not sent, "
            "rescheduled)."
        ), ["outcome"], registry=registry)
        self.bad_commands = Counter("pacer_sender_bad_commands_total", (
            "Messages on the item-command topics that are not valid item commands. Each only rings its key's "
            "guid: the item, if there is one, is read from Postgres."
        ), registry=registry)
        self.internal_errors = Counter("pacer_sender_internal_errors_total", (
            "Unexpected exceptions (bugs) while executing an item, or in a guid's worker; each is in the log with"
            " its traceback. The item is retried `PACER_SENDER_ITEM_ERROR_ATTEMPTS` times, then failed with "
            "`internal error: …` if still pending. Should stay at 0: report any rise with the log lines."
        ), registry=registry)
        self.swept = Counter("pacer_sender_swept_guids_total", (
            "Guids the sweep found in Postgres with work ready for longer than a sweep interval and no worker "
            "(see [lost doorbells](#lost-doorbells-pacer_sender_swept_guids_total)). `assign`: at a partition "
            "assignment — normal after a rebalance or a sender's death. `periodic`: a doorbell was lost."
        ), ["trigger"], registry=registry)
        self.rate_limited = Counter("pacer_sender_rate_limited_total", (
            "Rate-limited gateway answers: each one a deferral of the item (the guid slows down), neither an "
            "attempt nor a unit of the job's budget."
        ), registry=registry)
        self.buffered = Gauge("pacer_sender_buffered_items", (
            "Commands held in guids' in-memory windows (batch ones at most `PACER_SENDER_MAX_BUFFERED`). A guid's"
            " backlog beyond its window stays in Postgres."
        ), registry=registry)
        self.active_guids = Gauge("pacer_sender_active_guids", "Guids with work in hand.", registry=registry)
        self.leases_held = Gauge("pacer_sender_guid_leases_held", "Guid leases this sender holds.", registry=registry)
        self.takeovers = Gauge("pacer_sender_guid_takeovers", (
            "Guid leases taken over from another owner (whose lease had expired) since start."
        ), registry=registry)
