"""Lines that differ only in their numbers are shown once per window, the next one saying how
many were held back; a real Kafka client whose broker is away logs a few lines, not a flood."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import pytest

from pacer_common.kafka import CLIENT_LOG, make_producer
from pacer_common.logs import JsonFormatter, RepeatsHeldBack


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def shown() -> Iterator[tuple[logging.Logger, Clock, list[logging.LogRecord]]]:
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


def test_lines_alike_but_for_their_numbers_are_held_back_and_counted_on_the_next_one_shown(shown) -> None:
    logger, clock, records = shown
    for port in range(100):
        logger.error("Connect to ipv4#127.0.0.1:%d failed (after %dms)", 20000 + port, port)
        clock.now += 0.05
    assert [r.getMessage() for r in records] == ["Connect to ipv4#127.0.0.1:20000 failed (after 0ms)"]
    assert not hasattr(records[0], "held_back")
    clock.now += 30
    logger.error("Connect to ipv4#127.0.0.1:%d failed (after %dms)", 1, 2)
    assert len(records) == 2 and records[1].held_back == 99
    line = json.loads(JsonFormatter("svc").format(records[1]))
    assert line["held_back"] == 99, "the count must reach the JSON line"


def test_other_lines_and_other_levels_are_shown_meanwhile(shown) -> None:
    logger, _, records = shown
    logger.error("broker down")
    logger.warning("broker down")
    logger.error("broker down")
    logger.error("Kafka producer replaced")
    logger.error("broker down")
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("ERROR", "broker down"), ("WARNING", "broker down"), ("ERROR", "Kafka producer replaced")]


def test_a_real_client_with_its_broker_away_logs_each_kind_of_line_once(caplog: pytest.LogCaptureFixture) -> None:
    """A producer for an address nothing listens at tries again and again for two seconds:
    librdkafka logs each failed attempt, and the error callback reports them too. Each kind
    is shown once."""
    from pacer_dev.fakegateway.process import free_port

    caplog.set_level(logging.INFO)
    producer = make_producer({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, **{"reconnect.backoff.max.ms": 100})
    producer.produce("t", b"v")
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        producer.poll(0.05)
    producer.purge()
    producer.flush(1)
    lines = [r.getMessage() for r in caplog.records if r.name in (CLIENT_LOG.name, "pacer_common.kafka")]
    refused = [line for line in lines if "Connection refused" in line]
    assert refused, f"the client must say what is wrong: {lines}"
    shapes = {RepeatsHeldBack.shape(r) for r in caplog.records if r.name in (CLIENT_LOG.name, "pacer_common.kafka")}
    assert len(lines) == len(shapes), f"{len(lines)} lines for {len(shapes)} kinds: {lines}"
