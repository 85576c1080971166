"""The local broker's cluster id is one Kafka's storage tool accepts."""

from __future__ import annotations

import base64

from pacer_dev.infra.kafka import new_cluster_id


def test_cluster_ids_never_start_with_a_dash_and_carry_sixteen_bytes() -> None:
    ids = [new_cluster_id() for _ in range(10_000)]  # one in 64 raw ids starts with '-'
    assert not [i for i in ids if i.startswith("-")], "the storage tool would take it for an option"
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)
