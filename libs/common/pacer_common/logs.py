"""JSON logs, one object a line, carrying job/shard/item/guid ids from context, the
current trace (``trace_id``, ``span_id``) and, in the Control API, the HTTP request id."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
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
          "duration_ms", "index", "detail")


class bind:
    """``with bind(item_id=…, guid=…):`` adds ids to every log line inside the block."""

    def __init__(self, **ids: Any) -> None:
        self._ids = ids
        self._token: Any = None

    def __enter__(self) -> None:
        self._token = _context.set({**_context.get(), **self._ids})

    def __exit__(self, *_: object) -> None:
        _context.reset(self._token)


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
