"""JSON logs, one object a line, carrying job/shard/item/guid ids from context, the
current trace (``trace_id``, ``span_id``) and, in the Control API, the HTTP request id."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from asgi_correlation_id import correlation_id
from opentelemetry import trace

# Read-only default: each scope sets a new mapping, none is changed in place.
_context: ContextVar[Mapping[str, Any]] = ContextVar("pacer_log_context", default=MappingProxyType({}))
_FIELDS = ("job_id", "shard_id", "item_id", "guid", "request_id")
_EXTRA = ("migration", "reason", "count", "topic", "partition", "committed_offset", "method", "route", "status",
          "duration_ms", "index", "detail", "held_back", "held_back_until")
# What changes in a Kafka client's line from one attempt to the next, the rest being the same.
VOLATILE = re.compile(r"\b\d+ ?ms\b|\b\d+/\d+ brokers\b|\b\d+ identical error\(s\) suppressed")


class bind:
    """``with bind(item_id=…, guid=…):`` adds ids to every log line inside the block."""

    def __init__(self, **ids: Any) -> None:
        self._ids = ids
        self._token: Any = None

    def __enter__(self) -> None:
        self._token = _context.set({**_context.get(), **self._ids})

    def __exit__(self, *_: object) -> None:
        _context.reset(self._token)


class RepeatsHeldBack(logging.Filter):
    """Shows a line, then holds back lines like it for ``window_s``: the next one shown after
    that carries ``held_back``, how many like it were not, and ``held_back_until``, when the
    last of them was logged. Lines are alike when they have the same level and the same text
    but for what changes from one attempt to the next (:data:`VOLATILE`: milliseconds, counts
    of brokers down or of errors librdkafka itself suppressed); hosts, ports, partitions and
    offsets are kept, so lines about two brokers are two kinds. Only records ``applies``
    accepts are held back at all.

    For a client library that logs each failed connection attempt, several times a second,
    for as long as a server is away: the first attempt says what is wrong, and the lines after
    it would bury whatever else the service says meanwhile."""

    MAX_SHAPES = 1_000  # the kinds remembered; past this the longest unseen are forgotten

    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 applies: Callable[[logging.LogRecord], bool] = lambda _record: True) -> None:
        super().__init__()
        self.window_s = window_s
        self.clock = clock
        self.applies = applies
        # kind → [shown at (clock), held back since, the last held back's time (record.created)]
        self._shown: dict[tuple[int, str], list[float]] = {}
        self._lock = threading.Lock()  # client libraries log from threads of their own

    def forget(self) -> None:
        """Show the next line of each kind."""
        with self._lock:
            self._shown.clear()

    @staticmethod
    def shape(record: logging.LogRecord) -> tuple[int, str]:
        """What makes two lines alike: the level, and the text with what :data:`VOLATILE`
        matches as ``#``."""
        return record.levelno, VOLATILE.sub("#", record.getMessage())

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            if not self.applies(record):
                return True
            shape = self.shape(record)
        except Exception:  # a line that cannot be formatted is the handler's to report
            return True
        now = self.clock()
        with self._lock:
            seen = self._shown.pop(shape, None)
            if seen is not None and now - seen[0] < self.window_s:
                seen[1] += 1
                seen[2] = record.created
                self._shown[shape] = seen
                return False
            self._shown[shape] = [now, 0, 0.0]  # last in order: the longest unseen go first
            while len(self._shown) > self.MAX_SHAPES:
                del self._shown[next(iter(self._shown))]
        if seen is not None and seen[1]:
            record.held_back = int(seen[1])
            record.held_back_until = datetime.fromtimestamp(seen[2], UTC).isoformat(timespec="milliseconds")
        return True


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
            **_context.get(),
        }
        span = trace.get_current_span().get_span_context()
        out["trace_id"] = trace.format_trace_id(span.trace_id) if span.is_valid else None
        if span.is_valid:
            out["span_id"] = trace.format_span_id(span.span_id)
        http_request = correlation_id.get()
        if http_request is not None:
            out["http_request_id"] = http_request
        for key in _FIELDS + _EXTRA:
            if key in record.__dict__:
                out[key] = record.__dict__[key]
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def configure(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's own loggers go through the same handler (``serve`` gives uvicorn no log
    # config of its own). Its access log stays quiet: the Control API writes its own, with
    # the request id, and the ops endpoints are scraped every few seconds.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    for noisy in ("uvicorn.access", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
