"""Every metric of the control service, declared in one place (docs/runbook.md's metric list is
generated from it)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


class ControlMetrics:
    """The Control API's metrics in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("pacer_control_requests_total", (
            "Control API requests, by method (`GET`, `HEAD`, `POST`, `PUT`, `PATCH`, `DELETE`, `OPTIONS`, or "
            "`other` for any other token a caller sends), route template (`unmatched` for none) and status code."
        ), ["method", "route", "status"], registry=registry)
        self.seconds = Histogram("pacer_control_request_seconds", "Control API request time (to the first byte), by method (as "
                                 "`pacer_control_requests_total`) and route template",
                                 ["method", "route"], registry=registry)
