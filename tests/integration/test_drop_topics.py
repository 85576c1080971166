"""A one-run stack deletes its own topics when disposed of, and no one else's."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from pacer_common.kafka import ensure_topics
from pacer_dev.stack import drop_topics
from tests.integration.helpers import wait_for


def topics(kafka_config: dict[str, str]) -> set[str]:
    return set(AdminClient(dict(kafka_config)).list_topics(timeout=30).topics)


def test_drop_topics_deletes_the_prefix_topics_and_leaves_a_longer_prefix_alone(
    kafka_config: dict[str, str], topic_prefix: str
) -> None:
    # "<p>x.…" starts with "<p>" but is another stack's topic: only "<p>.…" is ours.
    other = f"{topic_prefix}x.item-commands"
    mine = [f"{topic_prefix}.item-commands", f"{topic_prefix}.item-events"]
    ensure_topics(kafka_config, {t: (2, {}) for t in [*mine, other]})
    # A created topic reaches the broker's metadata shortly after: drop_topics lists what is there.
    wait_for(lambda: {*mine, other} <= topics(kafka_config), 30, "the new topics in the metadata")

    assert drop_topics(kafka_config, topic_prefix) == sorted(mine)

    def gone() -> set[str] | None:  # a deletion reaches the broker's metadata shortly after
        now = topics(kafka_config)
        return None if now & set(mine) else now

    left = wait_for(gone, 30, "the prefix's topics gone from the metadata")
    assert other in left
    assert drop_topics(kafka_config, topic_prefix) == []
    assert drop_topics(kafka_config, f"{topic_prefix}x") == [other]
