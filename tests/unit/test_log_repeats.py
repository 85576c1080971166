"""A Kafka client's connection lines, and its error callbacks' lines, are shown once per
window, the next one saying how many like it were held back and until when; every other
line is shown, offset resets above all (they are counted from the client's log)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from pacer_common.kafka import CLIENT_ERRORS, CLIENT_LOG, make_producer
from pacer_common.logs import JsonFormatter, RepeatsHeldBack
from pacer_common.metrics import OffsetResets


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


Shown = tuple[logging.Logger, Clock, list[logging.LogRecord]]


@pytest.fixture
def shown() -> Iterator[Shown]:
    clock = Clock()
    logger = logging.getLogger(f"test.repeats.{time.monotonic_ns()}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addFilter(RepeatsHeldBack(window_s=30.0, clock=clock))
    records: list[logging.LogRecord] = []

    class Kept(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger.addHandler(Kept())
    yield logger, clock, records


CONNECT = "127.0.0.1:%d/bootstrap: Connect to ipv4#127.0.0.1:%d failed: Connection refused (after %dms in state CONNECT)"


def test_repeats_of_a_line_are_held_back_and_counted_with_their_time_on_the_next_one_shown(shown: Shown) -> None:
    logger, clock, records = shown
    for attempt in range(100):
        logger.error(CONNECT, 9092, 9092, attempt % 3)
        clock.now += 0.05
    assert [r.getMessage() for r in records] == [CONNECT % (9092, 9092, 0)]
    assert not hasattr(records[0], "held_back")
    clock.now += 30
    logger.error(CONNECT, 9092, 9092, 7)
    assert len(records) == 2 and records[1].__dict__["held_back"] == 99
    line = json.loads(JsonFormatter("svc").format(records[1]))
    assert line["held_back"] == 99, "the count must reach the JSON line"
    assert line["held_back_until"] <= line["ts"], "and when the last one held back was logged"


def test_lines_about_other_brokers_other_texts_and_other_levels_are_shown_meanwhile(shown: Shown) -> None:
    logger, _, records = shown
    logger.error(CONNECT, 9092, 9092, 0)
    logger.error(CONNECT, 9093, 9093, 0)  # another broker: another kind
    logger.warning(CONNECT, 9092, 9092, 0)
    logger.error("Kafka producer replaced")
    logger.error(CONNECT, 9092, 9092, 1)
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("ERROR", CONNECT % (9092, 9092, 0)), ("ERROR", CONNECT % (9093, 9093, 0)),
        ("WARNING", CONNECT % (9092, 9092, 0)), ("ERROR", "Kafka producer replaced")]


def test_offset_resets_of_every_partition_are_shown_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    """A group back after its records were deleted resets every partition within
    milliseconds, in lines alike but for the partition and the offset: each is counted."""
    registry = CollectorRegistry()
    resets = OffsetResets(registry, ["t.job-requests"])
    try:
        with caplog.at_level(logging.WARNING):
            for partition in range(3):
                CLIENT_LOG.warning("%s [%s] %s", "OFFSET", "rdkafka#consumer-1",
                                   f"t.job-requests [{partition}]: offset reset (at offset {1200 + partition} (leader "
                                   "epoch 3), broker 1) to offset BEGINNING (leader epoch -1): Broker: Offset out of "
                                   "range")
    finally:
        resets.close()
    assert registry.get_sample_value("pacer_kafka_offset_resets_total", {"topic": "t.job-requests"}) == 3
    assert sorted(r.__dict__["partition"] for r in caplog.records if r.levelno == logging.ERROR) == [0, 1, 2]


def test_a_real_client_with_its_broker_away_logs_a_few_lines_not_one_per_attempt(
        caplog: pytest.LogCaptureFixture) -> None:
    """A producer for an address nothing listens at tries again and again for two seconds:
    librdkafka logs each failed attempt, and the error callback reports them too."""
    from pacer_dev.fakegateway.process import free_port

    attempts: list[logging.LogRecord] = []

    class Attempts(logging.Filter):  # ahead of the others: sees every line the client logs
        def filter(self, record: logging.LogRecord) -> bool:
            attempts.append(record)
            return True

    counted = Attempts()
    CLIENT_LOG.filters.insert(0, counted)
    caplog.set_level(logging.INFO)
    try:
        producer = make_producer({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, **{"reconnect.backoff.max.ms": 100})
        producer.produce("t", b"v")
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            producer.poll(0.05)
        producer.purge()
        producer.flush(1)
    finally:
        CLIENT_LOG.removeFilter(counted)
    tried = sum(1 for r in attempts if "Connection refused" in r.getMessage())
    shown = [r.getMessage() for r in caplog.records if r.name in (CLIENT_LOG.name, CLIENT_ERRORS.name)]
    refused = [line for line in shown if "Connection refused" in line]
    assert tried >= 5, f"the client tried {tried} times in 2 s: too few to tell"
    assert 1 <= len(refused) <= 3, f"{len(refused)} lines shown for {tried} attempts: {refused}"
