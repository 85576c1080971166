"""Prometheus plumbing every service shares: one registry per service with the process,
platform and GC collectors and ``pacer_build_info``; totals kept elsewhere exported as
counters; Kafka consumer lag per partition from librdkafka's statistics."""

from __future__ import annotations

import json
import logging
import platform
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from pacer_common import gcpause
from pacer_common.db.errors import TRANSIENT_ERRORS, TRANSIENT_KINDS
from pacer_common.kafka import CLIENT_LOG
from pacer_common.loopwatch import LoopLag

log = logging.getLogger(__name__)


def pacer_version() -> str:
    try:
        return version("pacer")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "unknown"


def service_registry(service: str) -> CollectorRegistry:
    """A service's registry: process_* (CPU, memory, fds), python_info, python_gc_*,
    ``pacer_gc_pause_seconds_total{generation}``, ``pacer_event_loop_lag_seconds``,
    ``pacer_db_transient_errors_total{error}`` and ``pacer_build_info{service,version,python}``."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    GcPauses(registry)
    LoopLag(registry)
    TransientErrors(registry)
    Info("pacer_build", "Pacer build running in this process (value 1)", registry=registry).info(
        {"service": service, "version": pacer_version(), "python": platform.python_version()})
    return registry


class FunctionCounter(Collector):
    """A running total kept elsewhere (an object's attribute, a database count), exported
    as a counter ``<name>_total``. ``fn`` returning None exports nothing (e.g. a standby)."""

    def __init__(self, name: str, documentation: str, fn: Callable[[], float | None],
                 registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.fn = name, documentation, fn
        registry.register(self)

    def collect(self) -> Iterable[Metric]:
        value = self.fn()
        if value is not None:
            yield CounterMetricFamily(self.name, self.documentation, value=value)

    def describe(self) -> Iterable[Metric]:
        yield CounterMetricFamily(self.name, self.documentation)


class GcPauses(Collector):
    """``pacer_gc_pause_seconds_total{generation}``: time the cyclic garbage collector took, by
    generation (``gcpause.tune``); its rate is the share of the process's time lost to it."""

    NAME = "pacer_gc_pause_seconds"
    DOC = "Seconds the Python garbage collector spent collecting, by generation (the process stands still meanwhile)"

    def __init__(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self.NAME, self.DOC, labels=["generation"])
        for generation, seconds in gcpause.pause_seconds().items():
            family.add_metric([str(generation)], seconds)
        yield family

    def describe(self) -> Iterable[Metric]:
        yield CounterMetricFamily(self.NAME, self.DOC, labels=["generation"])


class ConsumerLag(Collector):
    """``pacer_kafka_consumer_lag{topic,partition}``: messages between a partition's high
    watermark and this consumer's committed offset, for the partitions assigned to it, from
    librdkafka's statistics (pass as ``stats_cb`` with ``statistics.interval.ms``). Bounded
    by the topics' partition counts; a partition revoked from this consumer drops out."""

    NAME = "pacer_kafka_consumer_lag"

    def __init__(self, registry: CollectorRegistry) -> None:
        self._lag: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def __call__(self, stats_json: str) -> None:
        try:
            lag = parse_consumer_lag(json.loads(stats_json))
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("unreadable librdkafka statistics: %s", exc)
            return
        with self._lock:
            self._lag = lag

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.NAME, "Consumer lag per assigned partition (messages)",
                                   labels=["topic", "partition"])
        with self._lock:
            for (topic, partition), lag in sorted(self._lag.items()):
                family.add_metric([topic, partition], lag)
        yield family

    def describe(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(self.NAME, "Consumer lag per assigned partition (messages)",
                                labels=["topic", "partition"])


def parse_consumer_lag(stats: Mapping[str, object]) -> dict[tuple[str, str], int]:
    """(topic, partition) → lag for every partition this consumer fetches (librdkafka gives
    -1 for unassigned ones and the internal partition -1)."""
    out: dict[tuple[str, str], int] = {}
    topics = stats.get("topics") or {}
    assert isinstance(topics, Mapping)
    for topic, t in topics.items():
        for pid, p in (t.get("partitions") or {}).items():
            lag = p.get("consumer_lag", -1)
            if pid != "-1" and isinstance(lag, int) and lag >= 0 and p.get("fetch_state") != "none":
                out[(topic, pid)] = lag
    return out


def gateway_latency(registry: CollectorRegistry) -> Callable[[str, str, float], None]:
    """``pacer_gateway_request_duration_seconds{operation,result}`` for a GatewayClient's ``observe``."""
    hist = Histogram("pacer_gateway_request_duration_seconds", "Gateway HTTP calls, by operation (send, lookup) and "
                     "result (HTTP status class or transport_error)", ["operation", "result"], registry=registry,
                     buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))

    def observe(operation: str, result: str, seconds: float) -> None:
        hist.labels(operation, result).observe(seconds)

    return observe


def consumer_lag_config(registry: CollectorRegistry, interval_ms: int = 5000) -> dict[str, Any]:
    """Consumer settings that keep ``pacer_kafka_consumer_lag`` in ``registry`` current."""
    return {"statistics.interval.ms": interval_ms, "stats_cb": ConsumerLag(registry)}


class OffsetResets(logging.Handler):
    """``pacer_kafka_offset_resets_total{topic}``: a consumer found its group's committed offset
    below the oldest record the partition still keeps. The records between were deleted by the
    topic's retention before the group read them, and the consumer goes on from the oldest
    kept (``auto.offset.reset=earliest``). librdkafka says so only in its own log (facility
    ``OFFSET``); this handler on :data:`CLIENT_LOG` counts each such reset and logs it as an
    error naming the partition and the offset the group had reached. A group's first start
    (no committed offset) is not counted. Each of ``topics`` (those the service consumes) has
    its series from the start, at 0, so an alert on it tells "none lost" from "not
    exported". :meth:`close` detaches it."""

    _RESET = re.compile(r"(?P<topic>\S+) \[(?P<partition>\d+)\]: offset reset \(at offset (?P<offset>-?\d+)\b"
                        r".*Offset out of range")

    def __init__(self, registry: CollectorRegistry, topics: Iterable[str] = ()) -> None:
        super().__init__(logging.WARNING)
        self.resets = Counter("pacer_kafka_offset_resets", (
            "Consumer offset resets because the group's committed offset was no longer kept: records of the topic "
            "were deleted by its retention before this service's group read them (see the error log for the "
            "partition and offset)"), ["topic"], registry=registry)
        for topic in topics:
            self.resets.labels(topic)
        CLIENT_LOG.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        found = self._RESET.search(str(args[2])) if len(args) == 3 and args[0] == "OFFSET" else None
        if found is None:
            return
        self.resets.labels(found["topic"]).inc()
        log.error("%s [%s]: the records from offset %s (where this consumer group had got to) up to the oldest one "
                  "kept were deleted by the topic's retention before the group read them; it goes on from the oldest "
                  "kept. Keep the topic's records longer than the longest outage (PACER_TOPIC_RETENTION_*_HOURS)",
                  found["topic"], found["partition"], found["offset"],
                  extra={"topic": found["topic"], "partition": int(found["partition"]),
                         "committed_offset": int(found["offset"])})

    def close(self) -> None:
        CLIENT_LOG.removeHandler(self)
        super().close()


class TransientErrors(Collector):
    """``pacer_db_transient_errors_total{error}``: units of work of this process that failed
    with a transient database error and ran again (``with_retry``), by kind: ``deadlock``,
    ``serialization_failure``, ``server_shutdown``, ``connection``. Every kind is exported
    from the start, at 0."""

    NAME = "pacer_db_transient_errors"
    DOC = ("Units of work that failed with a transient Postgres error and ran again, by kind: deadlock (two "
           "transactions took rows in opposite orders; Postgres broke the cycle), serialization_failure, "
           "server_shutdown, connection")

    def __init__(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def collect(self) -> Iterable[Metric]:
        out = CounterMetricFamily(self.NAME, self.DOC, labels=["error"])
        for kind in TRANSIENT_KINDS:
            out.add_metric([kind], TRANSIENT_ERRORS[kind])
        yield out

    def describe(self) -> Iterable[Metric]:
        yield CounterMetricFamily(self.NAME, self.DOC, labels=["error"])


class PoolStats(Collector):
    """``pacer_db_pool_*{pool}``: a service's Postgres pool, read from psycopg_pool's own
    counters at each scrape (``get_stats``): connections in use and idle, callers waiting for
    one and how long they waited, and connections closed instead of served again."""

    SPECS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
        ("gauge", "pacer_db_pool_connections", "Connections the pool holds now: `in_use` by a caller or `idle`",
         ("state",)),
        ("gauge", "pacer_db_pool_max_connections", "Most connections the pool may open", ()),
        ("gauge", "pacer_db_pool_requests_waiting", "Callers waiting for a connection now (all are in use and the "
         "pool is at its maximum, or a new one is being opened)", ()),
        ("counter", "pacer_db_pool_requests", "Connections asked of the pool", ()),
        ("counter", "pacer_db_pool_wait_seconds", "Time callers waited for a connection, summed; divided by "
         "pacer_db_pool_requests_total, the mean wait", ()),
        ("counter", "pacer_db_pool_connections_discarded", "Connections closed instead of served again: given back "
         "broken or in a state nobody checked (a use interrupted by a cancellation), or found broken in the pool", ()),
        ("counter", "pacer_db_pool_errors", "Failures: `timeout` (a caller got no connection in time), `connect` "
         "(opening a connection failed)", ("kind",)),
    )

    def __init__(self, pool: Any, registry: CollectorRegistry) -> None:
        self.pool = pool  # a psycopg_pool pool: its ``name`` and ``get_stats()``
        registry.register(self)

    @staticmethod
    def _values(s: Mapping[str, int]) -> dict[str, list[tuple[list[str], float]]]:
        size, idle = s.get("pool_size", 0), s.get("pool_available", 0)
        return {
            "pacer_db_pool_connections": [(["in_use"], size - idle), (["idle"], idle)],
            "pacer_db_pool_max_connections": [([], s.get("pool_max", 0))],
            "pacer_db_pool_requests_waiting": [([], s.get("requests_waiting", 0))],
            "pacer_db_pool_requests": [([], s.get("requests_num", 0))],
            "pacer_db_pool_wait_seconds": [([], s.get("requests_wait_ms", 0) / 1000)],
            "pacer_db_pool_connections_discarded": [([], s.get("returns_bad", 0) + s.get("connections_lost", 0))],
            "pacer_db_pool_errors": [(["timeout"], s.get("requests_errors", 0)),
                                     (["connect"], s.get("connections_errors", 0))],
        }

    @staticmethod
    def _family(kind: str, name: str, doc: str, labels: tuple[str, ...]) -> GaugeMetricFamily | CounterMetricFamily:
        family = GaugeMetricFamily if kind == "gauge" else CounterMetricFamily
        return family(name, doc, labels=["pool", *labels])

    def collect(self) -> Iterable[Metric]:
        values = self._values(self.pool.get_stats())
        for kind, name, doc, labels in self.SPECS:
            out = self._family(kind, name, doc, labels)
            for label_values, value in values[name]:
                out.add_metric([self.pool.name, *label_values], value)
            yield out

    def describe(self) -> Iterable[Metric]:
        for spec in self.SPECS:
            yield self._family(*spec)
