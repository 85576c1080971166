"""The control service's Kafka settings: without a broker named it still starts (its dead
letters answer 503); with settings that are wrong, it refuses to start."""

from __future__ import annotations

import pytest
from pydantic_settings import SettingsError

from pacer_control.main import _kafka


def test_no_broker_named_leaves_the_control_service_without_dead_letters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PACER_KAFKA_BOOTSTRAP_SERVERS", raising=False)
    assert _kafka() is None
    monkeypatch.setenv("PACER_KAFKA_BOOTSTRAP_SERVERS", "kafka-0:9092")
    monkeypatch.setenv("PACER_TOPIC_PREFIX", "acme")
    kafka = _kafka()
    assert kafka is not None and (kafka.kafka_bootstrap_servers, kafka.job_requests_dlq) == (
        "kafka-0:9092", "acme.job-requests.dlq")


def test_kafka_settings_that_are_wrong_still_stop_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PACER_KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("PACER_KAFKA_SECURITY", "not json")
    with pytest.raises(SettingsError):
        _kafka()
