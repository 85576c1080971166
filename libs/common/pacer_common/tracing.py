"""W3C trace context across Pacer: from a job request's Kafka headers (or a new root) through
the planner, the item (its row and command), the sender, the gateway call and the outcome.

Spans are made with the OpenTelemetry SDK, so every log line carries a ``trace_id``; they are
exported only when the standard variables ask for it: ``OTEL_TRACES_EXPORTER=console`` (to
stderr) or ``otlp`` (OTLP over HTTP, protobuf, to the collector its
``OTEL_EXPORTER_OTLP_*`` settings name). ``OTEL_SDK_DISABLED=true`` turns tracing off altogether.

A process that exports nothing (the default) records nothing either: its spans are the API's
non-recording spans, each with a fresh span id in its parent's trace (or a new one), so log
lines still carry the ``trace_id`` and the ``traceparent`` passed on keeps the trace and its
sampled flag for a service that does record. A recording SDK span costs about as much CPU as
the send it wraps (16% of a sender's samples at 10,000 guids: docs/performance.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from contextlib import AbstractContextManager

from opentelemetry import context, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)
_W3C = TraceContextTextMapPropagator()
HEADER = "traceparent"


def setup(service: str, processors: Iterable[SpanProcessor] = ()) -> TracerProvider | None:
    """Install the SDK's tracer provider for ``service`` (once per process)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", f"pacer-{service}")})
    provider = TracerProvider(resource=resource)
    exporter = _exporter(os.environ.get("OTEL_TRACES_EXPORTER", "none").strip().lower())
    processors = list(processors)
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    for p in processors:
        provider.add_span_processor(p)
    global _provider, _recording
    _provider = provider
    _recording = exporter is not None or bool(processors)
    trace.set_tracer_provider(provider)  # for libraries; the global can be set once per process
    return provider


def _exporter(name: str) -> SpanExporter | None:
    if name in ("", "none"):
        return None
    if name == "console":
        return ConsoleSpanExporter()
    if name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning("OTEL_TRACES_EXPORTER=otlp but opentelemetry-exporter-otlp-proto-http is not installed: "
                        "not exporting")
            return None
        exporter: SpanExporter = OTLPSpanExporter()
        return exporter
    log.warning("OTEL_TRACES_EXPORTER=%s is not supported (console, otlp, none): not exporting", name)
    return None


_provider: TracerProvider | None = None
_recording = True  # whether spans go through the SDK (something in this process records them)
_IDS = RandomIdGenerator()
_cached: tuple[TracerProvider | None, trace.Tracer] | None = None  # making a tracer costs more than a span


def tracer() -> trace.Tracer:
    global _cached
    if _cached is None or _cached[0] is not _provider:
        _cached = (_provider, _provider.get_tracer("pacer") if _provider is not None else trace.get_tracer("pacer"))
    return _cached[1]


def parent(traceparent: str | bytes | None) -> context.Context | None:
    """The context a ``traceparent`` value names; None (a new root) if absent or malformed."""
    if isinstance(traceparent, bytes):
        traceparent = traceparent.decode("ascii", "replace")
    if not traceparent:
        return None
    ctx = _W3C.extract({HEADER: traceparent})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def from_kafka(headers: Iterable[tuple[str, bytes | None]] | None) -> context.Context | None:
    for key, value in headers or ():
        if key == HEADER:
            return parent(value)
    return None


def current() -> str | None:
    """The ``traceparent`` of the current span, if there is one."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get(HEADER)


def kafka_headers(traceparent: str | None) -> list[tuple[str, bytes]]:
    return [(HEADER, traceparent.encode())] if traceparent else []


def http_headers() -> dict[str, str]:
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier


def span(name: str, parent: context.Context | None = None, kind: str = "internal",
         **attributes: str | int) -> AbstractContextManager[trace.Span]:
    """A span made current for the block: a child of ``parent`` (else of the current span,
    else a new root). ``kind``: internal, consumer, producer, client or server."""
    return _Current(name, parent, _KINDS[kind], attributes)


_KINDS = {"internal": trace.SpanKind.INTERNAL, "consumer": trace.SpanKind.CONSUMER,
          "producer": trace.SpanKind.PRODUCER, "client": trace.SpanKind.CLIENT, "server": trace.SpanKind.SERVER}


class _Current(AbstractContextManager[trace.Span]):
    """Not generator-based: an exception passes through untouched (a generator-based context
    manager re-raises it and sets its ``__traceback__``, which a frozen exception refuses)."""

    def __init__(self, name: str, parent: context.Context | None, kind: trace.SpanKind,
                 attributes: dict[str, str | int]) -> None:
        self.name, self.parent, self.kind, self.attributes = name, parent, kind, attributes

    def __enter__(self) -> trace.Span:
        if _recording or _provider is None:
            self.span = tracer().start_span(self.name, self.parent, self.kind, self.attributes)
        else:
            self.span = _unrecorded(self.parent)
        self.token = context.attach(trace.set_span_in_context(self.span, self.parent))
        return self.span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:200]))
        self.span.end()
        context.detach(self.token)


def _unrecorded(parent: context.Context | None) -> trace.Span:
    """A span nothing records: a fresh span id in the parent's trace (the current span's if no
    parent is given), else in a new trace."""
    up = trace.get_current_span(parent).get_span_context()
    if up.is_valid:
        return trace.NonRecordingSpan(trace.SpanContext(up.trace_id, _IDS.generate_span_id(), False,
                                                        up.trace_flags, up.trace_state))
    return trace.NonRecordingSpan(trace.SpanContext(_IDS.generate_trace_id(), _IDS.generate_span_id(), False,
                                                    trace.TraceFlags(trace.TraceFlags.SAMPLED)))
