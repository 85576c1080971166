"""What a consumer logs of a rebalance: each topic's partitions, in runs, so that an operator
reading a sender's (or planner's) log can tell which of the two item-command lanes and which
partitions it took or gave back."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import TopicPartition

from pacer_common.kafka import describe_partitions, logged_rebalances


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
