"""A consumer group's place on a topic: what it has still to read, and asking again while
the group's coordinator moves or loads (a new broker answers NOT_COORDINATOR until its
``__consumer_offsets`` is ready)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from pacer_common import kafka
from pacer_common.kafka import UNREAD_SPECS, GroupOnTopic, group_on_topic, unread


def _group(committed: dict[int, int], start: dict[int, int], end: dict[int, int]) -> GroupOnTopic:
    return GroupOnTopic([], sorted(committed), committed, {"start": start, "end": end})


def test_unread_counts_from_the_committed_offset_or_the_earliest_record_kept() -> None:
    g = _group(committed={0: 5, 1: -1, 2: 2, 3: 9}, start={0: 0, 1: 3, 2: 4, 3: 0}, end={0: 8, 1: 7, 2: 6, 3: 9})
    # 0: read to 5 of 8; 1: no offset, reads from its earliest record (3); 2: its offset was
    # deleted by retention, reads from 4; 3: read to its end.
    assert unread(g) == {0: (5, 8), 1: (3, 7), 2: (4, 6)}


def _failing(codes: list[int], calls: list[int]) -> Callable[..., GroupOnTopic]:
    def look(*_: object) -> GroupOnTopic:
        calls.append(1)
        if codes:
            raise KafkaException(KafkaError(codes.pop(0)))
        return _group({0: 1}, {0: 0}, {0: 1})
    return look


def test_a_coordinator_still_loading_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(kafka, "_group_on_topic", _failing(
        [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS], calls))
    assert unread(group_on_topic({}, "g", "t", UNREAD_SPECS, timeout_s=10)) == {}
    assert len(calls) == 3


def test_any_other_error_is_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(kafka, "_group_on_topic", _failing([KafkaError.UNKNOWN_TOPIC_OR_PART], calls))
    with pytest.raises(KafkaException):
        group_on_topic({}, "g", "t", UNREAD_SPECS, timeout_s=10)
    assert len(calls) == 1
