"""Each topic's retention comes from its own setting, in hours, -1 for ever."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pacer_common.cli import topic_layout
from pacer_common.settings import KafkaSettings


def _settings(**hours: int) -> KafkaSettings:
    return KafkaSettings.model_validate({"kafka_bootstrap_servers": "127.0.0.1:9092", "topic_prefix": "p",
                                         **{f"topic_retention_{k}_hours": v for k, v in hours.items()}})


def test_every_topic_gets_the_retention_of_its_own_setting() -> None:
    layout = topic_layout(_settings(requests=1, commands=2, outcomes=3, callbacks=4, dead_letters=5))
    retention = {name: config["retention.ms"] for name, (_, config) in layout.items()}
    assert retention == {
        "p.job-requests": "3600000",
        "p.job-requests.dlq": "18000000",
        "p.item-commands.online": "7200000",
        "p.item-commands.batch": "7200000",
        "p.item-outcomes": "10800000",
        "p.callbacks": "14400000",
        "p.callbacks.dlq": "18000000",
    }


def test_dead_letters_are_kept_longest_by_default_and_minus_one_keeps_them_for_ever() -> None:
    layout = topic_layout(_settings())
    kept = {name: int(config["retention.ms"]) for name, (_, config) in layout.items()}
    assert kept["p.job-requests.dlq"] == kept["p.callbacks.dlq"] > max(
        v for k, v in kept.items() if not k.endswith(".dlq"))
    forever = topic_layout(_settings(dead_letters=-1))
    assert forever["p.job-requests.dlq"][1]["retention.ms"] == forever["p.callbacks.dlq"][1]["retention.ms"] == "-1"
    assert forever["p.job-requests.dlq"][1]["max.message.bytes"] == layout["p.job-requests.dlq"][1]["max.message.bytes"]


@pytest.mark.parametrize("hours", [0, -2])
def test_a_retention_that_would_delete_at_once_is_refused_with_a_reason(hours: int) -> None:
    with pytest.raises(ValidationError) as refused:
        _settings(commands=hours)
    assert "topic_retention_commands_hours" in str(refused.value)
