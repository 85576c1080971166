"""Spans in a process that exports nothing: not recorded, yet the trace goes on — log lines
have a trace id and the traceparent passed on keeps the trace and its sampled flag."""

from __future__ import annotations

import http.server
import threading

from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pacer_common import tracing

UPSTREAM = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


def test_without_an_exporter_spans_are_not_recorded_but_carry_the_trace_on() -> None:
    tracing.setup("test")
    with tracing.span("outer") as outer, tracing.span("inner") as inner:
        passed_on = tracing.current()
    assert not outer.is_recording() and not inner.is_recording()
    o, i = outer.get_span_context(), inner.get_span_context()
    assert o.is_valid and i.is_valid and o.trace_id == i.trace_id and o.span_id != i.span_id
    assert passed_on == f"00-{i.trace_id:032x}-{i.span_id:016x}-01"  # a new root is sampled, for those who record

    with tracing.span("child", tracing.parent(UPSTREAM)) as child:
        ctx = child.get_span_context()
    assert f"{ctx.trace_id:032x}" == UPSTREAM.split("-")[1] and f"{ctx.span_id:016x}" != UPSTREAM.split("-")[2]
    assert ctx.trace_flags.sampled
    with tracing.span("child", tracing.parent(UNSAMPLED)) as child:
        assert not child.get_span_context().trace_flags.sampled  # the upstream decision stands


def test_with_a_processor_spans_are_recorded_with_their_parent() -> None:
    exporter = InMemorySpanExporter()
    tracing.setup("test", processors=[SimpleSpanProcessor(exporter)])
    try:
        with tracing.span("child", tracing.parent(UPSTREAM), item="i-1") as child:
            assert child.is_recording()
        (done,) = exporter.get_finished_spans()
        assert done.name == "child" and done.attributes == {"item": "i-1"}
        assert done.parent is not None and f"{done.parent.span_id:016x}" == UPSTREAM.split("-")[2]
    finally:
        tracing.setup("test")  # back to the default for the tests that follow
    assert not trace.get_current_span().is_recording()


def test_otlp_exports_spans_over_http_to_a_collector(monkeypatch) -> None:
    """``OTEL_TRACES_EXPORTER=otlp``: the exporter ships with Pacer (the image installs only
    what pyproject names), and spans reach an OTLP/HTTP endpoint as protobuf."""
    got: list[tuple[str, str, int]] = []

    class Collector(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, self.headers["Content-Type"], len(body)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Collector)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{server.server_port}/v1/traces")
    provider = None
    try:
        provider = tracing.setup("test")
        assert provider is not None
        with tracing.span("sent", item="i-1") as span:
            assert span.is_recording()
        assert provider.force_flush(10_000)
        assert got and got[0][0] == "/v1/traces" and got[0][1] == "application/x-protobuf" and got[0][2] > 0, got
    finally:
        if provider is not None:
            provider.shutdown()
        # Back to exporting nothing, for the tests that follow in this process: set up again
        # with the variable still set, it would make another OTLP exporter, one that sends
        # every later test's spans to this collector once it is gone, and logs the failures.
        monkeypatch.delenv("OTEL_TRACES_EXPORTER")
        tracing.setup("test")
        server.shutdown()
    with tracing.span("after") as after:
        assert not after.is_recording(), "the OTLP exporter outlived its test"
