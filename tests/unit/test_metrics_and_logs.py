"""Metrics whose label sets stay bounded, leader-only numbers, consumer lag, JSON logs with
trace and request ids, and the Control API counting its unhandled errors."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta

import httpx
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from pacer_common import tracing
from pacer_common.db.pool import new_pool
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.failures import DEFAULT_CODE_TABLE, FailureClass, SendError
from pacer_common.logs import JsonFormatter
from pacer_common.metrics import ConsumerLag, FunctionCounter, parse_consumer_lag, service_registry
from pacer_control.app import build_app
from pacer_reconciler.metrics import LeaderStats
from pacer_sender.core import Executed
from pacer_sender.metrics import SenderMetrics


def names(registry: CollectorRegistry) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in generate_latest(registry).decode().splitlines()
            if line and not line.startswith("#")}


def test_every_service_registry_has_process_gc_and_build_info() -> None:
    reg = service_registry("sender")
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "python_gc_collections_total",
            "python_info"} <= names(reg)
    assert reg.get_sample_value("pacer_build_info", {"service": "sender", "version": "0.1.0",
                                                     "python": __import__("platform").python_version()}) == 1


def test_a_total_kept_elsewhere_is_a_counter() -> None:
    reg, held = CollectorRegistry(), {"n": 3}
    FunctionCounter("pacer_sender_guid_takeovers", "takeovers", lambda: held["n"], reg)
    assert "# TYPE pacer_sender_guid_takeovers_total counter" in generate_latest(reg).decode()
    assert reg.get_sample_value("pacer_sender_guid_takeovers_total") == 3


def test_database_numbers_are_exported_by_the_leader_only() -> None:
    reg, leader = CollectorRegistry(), {"is": True}
    stats = LeaderStats(reg, lambda: leader["is"])
    stats.update({"guids_paused": 2, "stalled_shards": 1, "takeovers": 5, "jobs_paused_budget": 1,
                  "items:pending": 7, "guids_with_work:kicked": 3, "tenant_sends:acme": 40, "tenant_quota:acme": 50})
    assert reg.get_sample_value("pacer_reconciler_guids_paused") == 2
    assert reg.get_sample_value("pacer_reconciler_held_guids_with_work", {"state": "kicked"}) == 3
    assert reg.get_sample_value("pacer_reconciler_guids_by_state", {"state": "kicked"}) is None
    assert reg.get_sample_value("pacer_reconciler_tenant_sends_today", {"tenant": "acme"}) == 40
    assert reg.get_sample_value("pacer_reconciler_tenant_sends_per_day", {"tenant": "acme"}) == 50
    assert reg.get_sample_value("pacer_reconciler_guid_takeovers_total") == 5
    assert reg.get_sample_value("pacer_reconciler_jobs_paused", {"reason": "budget"}) == 1
    assert reg.get_sample_value("pacer_reconciler_open_job_items", {"status": "pending"}) == 7
    leader["is"] = False  # stepped down: nothing left behind to keep an alert firing
    assert not {n for n in names(reg) if n.startswith("pacer_reconciler_")}
    leader["is"] = True
    stats.forget()
    assert not {n for n in names(reg) if n.startswith("pacer_reconciler_")}


def test_consumer_lag_comes_from_librdkafka_statistics_for_assigned_partitions_only() -> None:
    stats = {"topics": {"p.item-commands.batch": {"partitions": {
        "0": {"consumer_lag": 12, "fetch_state": "active"},
        "1": {"consumer_lag": -1, "fetch_state": "none"},  # not assigned to this consumer
        "-1": {"consumer_lag": -1, "fetch_state": "none"},  # librdkafka's internal partition
    }}}}
    assert parse_consumer_lag(stats) == {("p.item-commands.batch", "0"): 12}
    reg = CollectorRegistry()
    lag = ConsumerLag(reg)
    lag(json.dumps(stats))
    lag("not json")  # an unreadable report keeps the last good one
    assert reg.get_sample_value("pacer_kafka_consumer_lag", {"topic": "p.item-commands.batch", "partition": "0"}) == 12


def command(kind: str = "campaign", priority: int = 3) -> ItemCommand:
    return ItemCommand(item_id="i", job_id="j", shard_id=1, guid="g", to_id="t", content="c", idem_key="k",
                       priority=priority, kind=kind, created_at=datetime.now(UTC) - timedelta(seconds=30))


@given(code=st.one_of(st.none(), st.integers(-10**9, 10**9)), kind=st.text(max_size=20))
def test_failure_codes_and_kinds_stay_a_bounded_label_set(code: int | None, kind: str) -> None:
    reg = CollectorRegistry()
    m = SenderMetrics(reg, DEFAULT_CODE_TABLE)
    err = SendError(FailureClass.RETRYABLE, code, "x")
    m.executed(command(kind), Executed("retry", True, err, datetime.now(UTC), datetime.now(UTC), True))
    codes = {s.labels["code"] for metric in reg.collect() if metric.name == "pacer_sender_send_failures"
             for s in metric.samples}
    kinds = {s.labels["kind"] for metric in reg.collect() if metric.name == "pacer_sender_items"
             for s in metric.samples}
    assert codes <= {str(c) for c in DEFAULT_CODE_TABLE} | {"other", "none"}
    assert kinds <= {"takeover_prompt", "auto_reply", "ticket_notify", "campaign", "other"}


def test_wait_is_observed_at_the_first_claim_and_end_to_end_at_confirmation() -> None:
    reg = CollectorRegistry()
    m = SenderMetrics(reg, DEFAULT_CODE_TABLE)
    now = datetime.now(UTC)
    m.executed(command(), Executed("confirmed", True, None, now, now, True))
    m.executed(command(), Executed("retry", True, SendError(FailureClass.RETRYABLE, -1, "busy"), now, now, False))
    labels = {"lane": "batch", "kind": "campaign"}
    assert reg.get_sample_value("pacer_sender_item_wait_seconds_count", labels) == 1
    assert (reg.get_sample_value("pacer_sender_item_wait_seconds_sum", labels) or 0) >= 29  # created 30 s before the claim
    assert reg.get_sample_value("pacer_sender_item_end_to_end_seconds_count", labels) == 1
    assert reg.get_sample_value("pacer_sender_send_failures_total", {"code": "-1", "failure_class": "retryable"}) == 1


def test_every_json_log_line_has_a_trace_id_inside_a_span() -> None:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "hello", None, None)
    fmt = JsonFormatter("test")
    assert json.loads(fmt.format(record))["trace_id"] is None
    tracing.setup("test")
    with tracing.span("work") as span:
        line = json.loads(fmt.format(record))
    assert line["trace_id"] == format(span.get_span_context().trace_id, "032x")


def test_the_control_api_counts_an_unhandled_error_as_500_and_logs_it_with_the_request_id() -> None:
    registry = CollectorRegistry()
    app = build_app(new_pool("postgresql://unused"), registry=registry)

    async def boom() -> None:
        raise RuntimeError("a defect")

    app.add_api_route("/api/v1/boom", boom)
    lines: list[dict[str, object]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(JsonFormatter("control").format(record)))

    access = logging.getLogger("pacer.control.access")
    handler = Keep()
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    request_id = uuid.uuid4().hex

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://control") as client:
            return await client.get("/api/v1/boom", headers={"X-Request-ID": request_id})

    try:
        resp = asyncio.run(go())
    finally:
        access.removeHandler(handler)
    assert resp.status_code == 500
    assert registry.get_sample_value("pacer_control_requests_total",
                                     {"method": "GET", "route": "/api/v1/boom", "status": "500"}) == 1
    (line,) = [x for x in lines if x.get("route") == "/api/v1/boom"]
    assert line["status"] == 500 and line["http_request_id"] == request_id


def test_the_control_api_counts_a_method_outside_the_http_set_as_other() -> None:
    """h11 accepts any token as a method: each new one must not be a new series."""
    registry = CollectorRegistry()
    app = build_app(new_pool("postgresql://unused"), registry=registry)

    async def go() -> list[int]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://control") as client:
            return [(await client.request(m, "/healthz")).status_code for m in ("FROBNICATE123", "X1", "GET")]

    assert asyncio.run(go())[2] == 200
    assert registry.get_sample_value("pacer_control_requests_total",
                                     {"method": "other", "route": "/healthz", "status": "405"}) == 2
    assert registry.get_sample_value("pacer_control_requests_total",
                                     {"method": "GET", "route": "/healthz", "status": "200"}) == 1
    methods = {s.labels["method"] for metric in registry.collect() if metric.name.startswith("pacer_control_")
               for s in metric.samples if "method" in s.labels}
    assert methods == {"GET", "other"}, methods


def test_a_media_steps_gateway_failure_is_counted_and_pacers_own_deferral_is_not() -> None:
    reg = CollectorRegistry()
    m = SenderMetrics(reg, DEFAULT_CODE_TABLE)
    limited = SendError(FailureClass.RATE_LIMITED, 45009, "too fast")
    m.executed(command(), Executed("media_waiting", False, limited))  # an upload the gateway rate-limited
    deferred = SendError(FailureClass.RATE_LIMITED, None, "circuit open", deferred=True)
    m.executed(command(), Executed("deferred", False, deferred))
    assert reg.get_sample_value("pacer_sender_send_failures_total",
                                {"code": "45009", "failure_class": "rate_limited"}) == 1
    assert reg.get_sample_value("pacer_sender_send_failures_total",
                                {"code": "none", "failure_class": "rate_limited"}) is None
