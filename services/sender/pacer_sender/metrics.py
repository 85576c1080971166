"""Every metric of the sender, declared in one place (docs/runbook.md's metric list is generated
from it): outcomes by lane and kind, failures by gateway code, how long items waited for a
claim, how long from being planned to the gateway's answer, and the sender's own state."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import DEFAULT_CODE_TABLE, FailureClass, code_label
from pacer_common.domain.requests import JobKind, Lane, lane_of
from pacer_sender.core import Executed

_KINDS = frozenset(k.value for k in JobKind)
# Seconds: a claim's write, up to a stalled loop.
DELAY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# Seconds: from a send within a pacing interval to a backlog drained over a day.
WAIT_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400)
# The sender's background loops, as ``pacer_sender_loop_errors_total`` names them.
LOOPS = ("limits", "leases", "sweep", "tenants", "usage", "published_limits")


def kind_label(kind: str) -> str:
    return kind if kind in _KINDS else "other"


class SenderMetrics:
    """The sender's metrics in ``registry``; the gauges get their functions in ``main``."""

    def __init__(self, registry: CollectorRegistry,
                 code_table: Mapping[int, FailureClass] = DEFAULT_CODE_TABLE) -> None:
        self.code_table = code_table
        self.items = Counter("pacer_sender_items_total", (
            "Items executed, by lane and kind: `confirmed`; `retry` (scheduled again: `waiting_retry`); `failed`; "
            "`in_doubt` (→ `recovery_pending`); `rate_limited` (the gateway rate-limited it: rescheduled, guid "
            "slowed down); `deferred` (deferred by Pacer before any request, its tenant's breaker open or daily quota "
            "used up: rescheduled, no attempt used, the guid not slowed); `expired`; "
            "`duplicate` (idempotency key held by another item: abandoned); `not_pending` (a redelivered command for "
            "an item already taken or finished: no-op); `fenced` (gateway answered but the lease had been taken "
            "over: outcome not recorded, the item is verified instead); `guid_lost` (this sender no longer holds the "
            "guid's lease: put back); `deadline_missed` (too long between claim and gateway call, Pacer's own lateness:"
            " not sent, rescheduled, its attempt and budget unit given back); `expiring` (its `expire_at` came "
            "between claim and gateway call: not sent, put back to be expired, counted `expired` once it is, by a "
            "sender or the reconciler's `expire_due` sweep); "
            "`needs_human` (the gateway said the account is offline, kicked or unauthorized: the guid "
            "is held); `media_waiting` (a media item whose media is not ready yet: it waits, pending, unclaimed); "
            "`media_ready` (a media item whose upload or status poll, made now, found its media ready: that call was"
            " the guid's turn, the item is sent at the next, one pacing gap after the call's answer); "
            "`yielded` (a claimed item gave its turn up: a batch one waiting for its turn (its pacing gap's end, or "
            "a short quiet of the guid) to an online item of the guid, any to a quiet the gateway asked of the guid, "
            "learned at a renewal or at the claim, that lasts past its turn by more than the sender waits for one "
            "(a second, at most a quarter of the send deadline): not sent, rescheduled, its attempt given back); "
            "`held` (its job, shard or guid is on hold, found at "
            "the claim or, for a media item, before any upload or status poll: it stays pending, and is published "
            "again when the hold is lifted)."
        ), ["outcome", "lane", "kind"], registry=registry)
        self.failures = Counter("pacer_sender_send_failures_total", "Gateway calls that did not confirm a send, by "
                                "gateway code (codes outside the code table as 'other', none as 'none') and class",
                                ["code", "failure_class"], registry=registry)
        for code, cls in code_table.items():
            self.failures.labels(str(code), cls.value)
        self.rate_limited = Counter("pacer_sender_rate_limited_total", (
            "Rate-limited gateway answers: each one a deferral of the item (the guid slows down), neither an "
            "attempt nor a unit of the job's budget."
        ), registry=registry)
        self.wait = Histogram("pacer_sender_item_wait_seconds", "From an item being due (planned, or its "
                              "not_before) to its claim by a sender, first claims only", ["lane", "kind"],
                              registry=registry, buckets=WAIT_BUCKETS)
        self.end_to_end = Histogram("pacer_sender_item_end_to_end_seconds", "From an item being planned to the "
                                    "gateway's answer confirming it", ["lane", "kind"], registry=registry,
                                    buckets=WAIT_BUCKETS)
        self.send_delay = Histogram("pacer_sender_send_delay_seconds", (
            "From the moment a send was allowed (its guid's pacing gap over, or the item's pick if later) to its "
            "gateway call's start: the claim's write, less what claiming ahead of the gap's end hid "
            "(PACER_SENDER_CLAIM_AHEAD_MS), and for a media item its media made ready. Every second of it "
            "lengthens a paced guid's gap."
        ), ["lane"], registry=registry, buckets=DELAY_BUCKETS)

        self.shed = Counter("pacer_sender_shed_items_total", (
            "Batch items expired early (error class `shed`): at their guid's current rate they could not go out "
            "before their `expire_at`. A rise means a backlog that will not drain in time: see the guid's backlog."
        ), registry=registry)
        self.bad_commands = Counter("pacer_sender_bad_commands_total", (
            "Messages on the item-command topics that are not valid item commands. Each only rings its key's "
            "guid: the item, if there is one, is read from Postgres."
        ), registry=registry)
        self.internal_errors = Counter("pacer_sender_internal_errors_total", (
            "Unexpected exceptions (bugs) while executing an item, or in a guid's worker; each is in the log with"
            " its traceback. The item is retried `PACER_SENDER_ITEM_ERROR_ATTEMPTS` times, then failed with "
            "`internal error: …` if still pending. Should stay at 0: report any rise with the log lines."
        ), registry=registry)
        self.loop_errors = Counter("pacer_sender_loop_errors_total", (
            "Failed rounds of the sender's background loops, by loop: `limits` (reading hot limits from "
            "`guid_limits`), `leases` (renewing guid leases, giving idle ones back, writing rate-limit penalties), "
            "`sweep` (looking for queued work without a worker), `tenants` (reading the tenant table), `usage` "
            "(adding sends to the tenants' daily quota), `published_limits` (writing this sender's limits to "
            "`sender_limits`). Each failure is in the log with its error; the loop goes on (the hot limits one "
            "further apart while it keeps failing). Should stay at 0: a loop that keeps failing leaves its work "
            "undone (limit changes not applied, idle leases never given back or leases lapsing, lost doorbells "
            "not found)."
        ), ["loop"], registry=registry)
        for loop in LOOPS:
            self.loop_errors.labels(loop)
        self.swept = Counter("pacer_sender_swept_guids_total", (
            "Guids the sweep found in Postgres with work ready for longer than a sweep interval and no worker "
            "(see [lost doorbells](#lost-doorbells-pacer_sender_swept_guids_total)). `assign`: at a partition "
            "assignment — normal after a rebalance or a sender's death. `periodic`: a doorbell was lost."
        ), ["trigger"], registry=registry)
        self.buffered = Gauge("pacer_sender_buffered_items", (
            "Commands held in guids' in-memory windows (batch ones about `PACER_SENDER_MAX_BUFFERED`, at most about"
            " twice it). A guid's backlog beyond its window stays in Postgres."
        ), registry=registry)
        self.active_guids = Gauge("pacer_sender_active_guids", "Guids with work in hand.", registry=registry)
        self.leases_held = Gauge("pacer_sender_guid_leases_held", (
            "Guid leases this sender holds: its guids with work, and those idle for less than "
            "`PACER_SENDER_IDLE_LEASE_S` (each renewed every TTL/3)."), registry=registry)
        self.partitions_assigned = Gauge("pacer_sender_partitions_assigned", (
            "Item-command partitions (both lane topics) the consumer group gives this sender: it runs the guids "
            "that hash to them. 0 on a live sender: more senders than partitions, or the group has not assigned "
            "it yet (see docs/scale.md for the partition count and the ceiling on senders)."
        ), registry=registry)
        self.open_breakers = Gauge("pacer_sender_open_tenant_breakers", (
            "Tenants whose gateway circuit breaker is open in this sender (their sends deferred at once, see "
            "`PACER_SENDER_BREAKER_FAILURES`). Above 0 for minutes: that tenant's gateway is down or refuses us."
        ), registry=registry)
        self.takeovers = Counter("pacer_sender_guid_takeovers", (
            "Guid leases taken over from another owner (whose lease had expired); counted by the lease book."
        ), registry=registry)

    def send_delay_observed(self, lane: Lane, seconds: float) -> None:
        self.send_delay.labels(lane).observe(seconds)

    def executed(self, cmd: ItemCommand, res: Executed) -> None:
        lane, kind = lane_of(cmd.priority), kind_label(cmd.kind)
        self.items.labels(res.outcome, lane, kind).inc()
        if res.outcome == "rate_limited":
            self.rate_limited.inc()
        if res.error is not None and not res.error.deferred:  # a media step's too: the gateway answered
            self.failures.labels(code_label(res.error.code, self.code_table), res.error.failure_class.value).inc()
        if cmd.created_at is None:
            return
        if res.claimed_at is not None and res.first_claim:
            due = max(cmd.created_at, cmd.not_before) if cmd.not_before else cmd.created_at
            self.wait.labels(lane, kind).observe(max(0.0, (res.claimed_at - due).total_seconds()))
        if res.outcome == "confirmed" and res.answered_at is not None:
            self.end_to_end.labels(lane, kind).observe(max(0.0, (res.answered_at - cmd.created_at).total_seconds()))
