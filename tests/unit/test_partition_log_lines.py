"""What a consumer logs of a rebalance: each topic's partitions, in runs, so that an operator
reading a sender's (or planner's) log can tell which of the two item-command lanes and which
partitions it took or gave back; and what librdkafka says while a new broker loads its group
coordinator, a notice rather than a warning."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import TopicPartition

from pacer_common.kafka import CLIENT_LOG, describe_partitions, logged_rebalances


def tps(topic: str, *numbers: int) -> list[TopicPartition]:
    return [TopicPartition(topic, n) for n in numbers]


@pytest.mark.parametrize("partitions, line", [
    (tps("t.online", 3, 0, 1, 2) + tps("t.batch", 2, 1, 0, 3), "t.batch 0-3; t.online 0-3"),
    (tps("t.batch", 0, 1, 2, 5, 7, 8, 12), "t.batch 0-2, 5, 7-8, 12"),
    (tps("t.batch", 4), "t.batch 4"),
    (tps("t.batch", 4, 4), "t.batch 4"),
    ([], "none"),
], ids=["two lanes", "runs and gaps", "one", "repeated", "nothing"])
def test_partitions_read_by_topic_in_runs(partitions: list[TopicPartition], line: str) -> None:
    assert describe_partitions(partitions) == line


def test_rebalances_are_logged_and_a_loss_warns(caplog: pytest.LogCaptureFixture) -> None:
    callbacks = logged_rebalances(logging.getLogger("test.rebalance"))
    with caplog.at_level(logging.INFO, logger="test.rebalance"):
        callbacks["on_assign"](None, tps("req", 0, 1, 2))
        callbacks["on_revoke"](None, tps("req", 2))
        callbacks["on_assign"](None, [])  # an incremental rebalance that gave this member nothing
        callbacks["on_lost"](None, tps("req", 0, 1))
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "partitions assigned: req 0-2"),
        ("INFO", "partitions revoked: req 2"),
        ("WARNING", "partitions lost: req 0-1"),
    ]


def test_a_broker_still_loading_its_coordinator_is_an_info_line_and_other_client_warnings_stay(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=CLIENT_LOG.name)
    CLIENT_LOG.warning("%s [%s] %s", "IDEMPOTENCE", "rdkafka#producer-1", "Failed to acquire idempotence PID from "
                       "broker 127.0.0.1:9092/1: Coordinator load in progress: retrying")
    CLIENT_LOG.warning("%s [%s] %s", "FAIL", "rdkafka#producer-1", "127.0.0.1:9092/1: Connect to ipv4#127.0.0.1:9092 "
                       "failed: Connection refused")
    assert [(r.levelname, r.args[0]) for r in caplog.records] == [("INFO", "IDEMPOTENCE"), ("WARNING", "FAIL")]
    caplog.clear()
    caplog.set_level(logging.WARNING, logger=CLIENT_LOG.name)
    CLIENT_LOG.warning("%s [%s] %s", "IDEMPOTENCE", "rdkafka#producer-1", "Coordinator load in progress: retrying")
    assert caplog.records == [], "below the service's log level once it is a notice"
