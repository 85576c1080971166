"""Partitions added to the lane topics while two senders run (docs/runbook.md, "To raise the
ceiling"): a guid now hashes to another partition, and the sender that sent for it before
keeps its own partition, so nothing is revoked from it. It must still give the guid back, or
it renews the guid's lease for ever and the partition's new owner never sends for it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from pacer_common.domain.ids import Guid
from pacer_dev.infra import Infra
from pacer_dev.stack import Stack
from pacer_sender.domain.partitions import partition_of
from tests.conftest import stack_on
from tests.e2e.conftest import gateway
from tests.e2e.helpers import campaign_again, job_state, publish, request, sends_for
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.e2e

GUIDS = 20


def test_after_partitions_are_added_each_guid_is_sent_by_the_owner_of_its_new_partition(
        infra_env: Infra, tmp_path: Path) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    with stack_on(infra_env, tmp_path, prefix, {
        "PACER_KAFKA_ITEM_COMMAND_PARTITIONS": "1", "PACER_SENDER_SWEEP_S": "1",
        "PACER_SENDER_MIN_INTERVAL_MS": "200", "PACER_SENDER_JITTER_MS": "0",
    }) as st:
        st.start_gateway(wait=False, min_interval_ms=150)
        st.start_services("planner")
        st.start_service("sender", "sender-1", PACER_SENDER_OWNER="sender-1")
        first = request(GUIDS, GUIDS)
        rid = str(first["request_id"])
        publish(st, json.dumps(first).encode(), key=rid.encode())
        wait_for(lambda: len(sends_for(st, rid)) == GUIDS, 60, "every guid's first send (sender-1: one partition)")
        assert _owners(st, rid) == {"sender-1"}, "one partition: the first sender holds every guid's lease"

        st.start_service("sender", "sender-2", PACER_SENDER_OWNER="sender-2")
        admin = AdminClient({"bootstrap.servers": infra_env.kafka_bootstrap})
        lanes = [f"{prefix}.item-commands.{lane}" for lane in ("online", "batch")]
        for fut in admin.create_partitions([NewPartitions(t, 2) for t in lanes]).values():
            fut.result(30)
        wait_for(lambda: all(st.metric(s, "pacer_sender_partitions_assigned") == 2.0 for s in ("sender-1", "sender-2")),
                 60, "partition N of both lanes assigned to each sender")
        # The running planner still hashes with one partition: every doorbell reaches the
        # sender of partition 0, which sends what it can take the lease of; the other sender's
        # sweep finds the rest in Postgres.
        _campaign_again(st, rid, "again")
        # A planner started now hashes with the new count: each doorbell reaches the owner of
        # the guid's new partition.
        st.stop("planner")
        st.start_service("planner", "planner-2")
        _campaign_again(st, rid, "third")

        owners = _lease_owners(st, rid)
        assert len(owners) == GUIDS, "every guid's lease is held by the sender that sent for it last"
        by_partition: dict[int, set[str]] = {}
        for guid, owner in owners.items():
            by_partition.setdefault(partition_of(Guid(guid), 2), set()).add(owner)
        assert sorted(map(len, by_partition.values())) == [1, 1] and set.union(*by_partition.values()) == {
            "sender-1", "sender-2"}, f"each partition's guids sent by its owner: {by_partition}"
        sends = sends_for(st, rid)
        assert len(sends) == 3 * GUIDS and len({s["idempotencyKey"] for s in sends}) == 3 * GUIDS
        assert gateway(st, "/_admin/stats")["interval_violations"] == 0


def _campaign_again(st: Stack, rid: str, tag: str) -> None:
    """One more item on each guid of campaign ``rid``; waits until every one is sent."""
    again = campaign_again(st, rid, GUIDS, tag)
    wait_for(lambda: (s := job_state(st, again)) and s[1] == {"confirmed": GUIDS}, 90,
             f"every guid's {tag} send, whichever partition it now hashes to")


def _lease_owners(st: Stack, prefix: str) -> dict[str, str]:
    """guid → the sender (its configured name) holding the guid's lease."""
    with psycopg.connect(st.infra.database_url) as conn:
        rows = conn.execute("SELECT guid, owner FROM guid_leases WHERE guid LIKE %s AND owner IS NOT NULL", (f"{prefix}-%",)).fetchall()
    return {guid: owner.split(":", 1)[0] for guid, owner in rows}


def _owners(st: Stack, prefix: str) -> set[str]:
    return set(_lease_owners(st, prefix).values())
