"""`pacer topics` on a real broker: topics made with each one's retention, and an existing
topic brought to a changed setting without losing the configs Pacer does not manage."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from pacer_common import cli
from tests.integration.helpers import wait_for


def _configs(kafka_config: dict[str, str], topic: str) -> dict[str, str]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    admin = AdminClient(dict(kafka_config))  # kept until the answer is in: its handle serves the future
    found = admin.describe_configs([res])[res].result(30)
    return {k: str(v.value) for k, v in found.items()}


def _topics(capsys: pytest.CaptureFixture[str]) -> list[str]:
    with pytest.raises(SystemExit) as done:
        cli.main(["topics"])
    assert done.value.code == 0
    return capsys.readouterr().out.splitlines()


def test_topics_are_made_with_their_retention_and_a_changed_setting_is_applied_to_them(
        kafka_config: dict[str, str], topic_prefix: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PACER_KAFKA_BOOTSTRAP_SERVERS", kafka_config["bootstrap.servers"])
    monkeypatch.setenv("PACER_TOPIC_PREFIX", topic_prefix)
    monkeypatch.setenv("PACER_TOPIC_RETENTION_COMMANDS_HOURS", "2")
    monkeypatch.setenv("PACER_TOPIC_RETENTION_DEAD_LETTERS_HOURS", "-1")
    batch, dlq = f"{topic_prefix}.item-commands.batch", f"{topic_prefix}.job-requests.dlq"

    first = _topics(capsys)
    assert f"topic {batch} partitions=16 retention.ms=7200000" in first
    # A broker applies a topic's configs a moment after it answers (KRaft metadata): read them
    # back until they show.
    wait_for(lambda: _configs(kafka_config, batch)["retention.ms"] == "7200000", what="the command topic's retention")
    assert _configs(kafka_config, dlq)["retention.ms"] == "-1"
    assert _configs(kafka_config, f"{topic_prefix}.item-outcomes")["retention.ms"] == str(168 * 3_600_000)

    # An operator's own config on the topic, which Pacer does not manage, must survive.
    admin = AdminClient(dict(kafka_config))
    res = ConfigResource(ResourceType.TOPIC, batch, incremental_configs=[
        ConfigEntry("segment.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    wait_for(lambda: _configs(kafka_config, batch)["segment.ms"] == "3600000", what="the operator's segment.ms")

    monkeypatch.setenv("PACER_TOPIC_RETENTION_COMMANDS_HOURS", "5")
    second = _topics(capsys)
    assert f"topic {batch} partitions=16 retention.ms=18000000 (retention.ms was 7200000)" in second
    wait_for(lambda: _configs(kafka_config, batch)["retention.ms"] == "18000000", what="the changed retention")
    assert _configs(kafka_config, batch)["segment.ms"] == "3600000"
    assert _configs(kafka_config, dlq)["retention.ms"] == "-1"

    assert not [line for line in _topics(capsys) if " was " in line]  # nothing left to change
