"""`pacer topics` reads a topic's configs again while the broker does not know the topic yet
(one just created reaches every broker's metadata a moment after the creation)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pacer_common.kafka import _topic_configs, durable


class _Admin:
    """Answers UNKNOWN_TOPIC_OR_PART ``unknown_for`` times, then the topic's configs."""

    def __init__(self, unknown_for: int, code: int = KafkaError.UNKNOWN_TOPIC_OR_PART) -> None:
        self.unknown_for, self.code, self.asked = unknown_for, code, 0

    def describe_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, Future[Any]]:
        self.asked += 1
        out: dict[Any, Future[Any]] = {}
        for res in resources:
            fut: Future[Any] = Future()
            if self.asked <= self.unknown_for:
                fut.set_exception(KafkaException(KafkaError(self.code)))
            else:
                fut.set_result({"retention.ms": "7200000"})
            out[res] = fut
        return out


def test_a_topic_the_broker_does_not_know_yet_is_asked_for_again() -> None:
    admin = _Admin(unknown_for=2)
    assert _topic_configs(admin, ["p.item-commands.batch"], 10.0) == {  # type: ignore[arg-type]
        "p.item-commands.batch": {"retention.ms": "7200000"}}
    assert admin.asked == 3


def test_any_other_error_is_raised_at_once() -> None:
    admin = _Admin(unknown_for=1, code=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        _topic_configs(admin, ["p.item-commands.batch"], 10.0)  # type: ignore[arg-type]
    assert admin.asked == 1


@pytest.mark.parametrize(("rf", "insync"), [(1, "1"), (2, "1"), (3, "2")])
def test_a_topic_made_here_acknowledges_only_what_two_brokers_hold_where_it_can(rf: int, insync: str) -> None:
    assert durable({"retention.ms": "1"}, rf) == {"min.insync.replicas": insync, "retention.ms": "1"}
    assert durable({"min.insync.replicas": "3"}, 3) == {"min.insync.replicas": "3"}  # set by the layout: kept
