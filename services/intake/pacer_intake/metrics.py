"""The intake's metrics: callbacks by tenant and result, and how long an answer took."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from pacer_intake.core import RESULTS

# A tenant label for a name the tenant table does not hold: anyone may post to any path, and
# a label per made-up name would grow without bound.
UNKNOWN = "unknown"


class IntakeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.callbacks = Counter("pacer_intake_callbacks_total", (
            "Callbacks received, by tenant and result: `accepted` (appended, acknowledged), `dead_lettered` "
            "(signed but malformed: in `<prefix>.callbacks.dlq` with the reason, answered 400), `bad_signature` "
            "(401), `unknown_tenant` (404), `too_large` (413), `unavailable` (Kafka did not acknowledge: 503, the "
            "gateway sends it again). `tenant` is a tenant's name, or `unknown` for a name that is none: one series "
            "per tenant and result, bounded by the tenant table."
        ), ["tenant", "result"], registry=registry)
        self.seconds = Histogram("pacer_intake_answer_seconds", (
            "From a callback request's body read to its answer, by result; for `accepted` this is the wait for "
            "Kafka's acknowledgement (acks=all)."
        ), ["result"], registry=registry, buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        for result in RESULTS:
            self.seconds.labels(result)
