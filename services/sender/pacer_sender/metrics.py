"""The sender's metrics: outcomes by lane and kind, failures by gateway code, how long items
waited for a claim, and how long from being planned to the gateway's answer."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import FailureClass, code_label
from pacer_common.domain.requests import JobKind, lane_of
from pacer_sender.core import Executed

_KINDS = frozenset(k.value for k in JobKind)
# Seconds: from a send within a pacing interval to a backlog drained over a day.
WAIT_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400)


def kind_label(kind: str) -> str:
    return kind if kind in _KINDS else "other"


class SenderMetrics:
    def __init__(self, registry: CollectorRegistry, code_table: Mapping[int, FailureClass]) -> None:
        self.code_table = code_table
        self.items = Counter("pacer_sender_items_total", "Items executed, by outcome, lane and kind",
                             ["outcome", "lane", "kind"], registry=registry)
        self.failures = Counter("pacer_sender_send_failures_total", "Gateway calls that did not confirm a send, by "
                                "gateway code (codes outside the code table as 'other', none as 'none') and class",
                                ["code", "failure_class"], registry=registry)
        for code, cls in code_table.items():
            self.failures.labels(str(code), cls.value)
        self.rate_limited = Counter("pacer_sender_rate_limited_total", "Rate-limited gateway answers: the guid "
                                    "slowed, the item deferred (no attempt, no budget used)", registry=registry)
        self.wait = Histogram("pacer_sender_item_wait_seconds", "From an item being due (planned, or its "
                              "not_before) to its claim by a sender, first claims only", ["lane", "kind"],
                              registry=registry, buckets=WAIT_BUCKETS)
        self.end_to_end = Histogram("pacer_sender_item_end_to_end_seconds", "From an item being planned to the "
                                    "gateway's answer confirming it", ["lane", "kind"], registry=registry,
                                    buckets=WAIT_BUCKETS)

    def executed(self, cmd: ItemCommand, res: Executed) -> None:
        lane, kind = lane_of(cmd.priority), kind_label(cmd.kind)
        self.items.labels(res.outcome, lane, kind).inc()
        if res.outcome == "rate_limited":
            self.rate_limited.inc()
        if res.error is not None and res.called_gateway:
            self.failures.labels(code_label(res.error.code, self.code_table), res.error.failure_class.value).inc()
        if cmd.created_at is None:
            return
        if res.claimed_at is not None and res.first_claim:
            due = max(cmd.created_at, cmd.not_before) if cmd.not_before else cmd.created_at
            self.wait.labels(lane, kind).observe(max(0.0, (res.claimed_at - due).total_seconds()))
        if res.outcome == "confirmed" and res.answered_at is not None:
            self.end_to_end.labels(lane, kind).observe(max(0.0, (res.answered_at - cmd.created_at).total_seconds()))
