"""``bench fleet``: several sender processes in one group over many slow guids, one added and
one removed mid-run.

Every guid holds more items than the window can send, paced at one send per
``BENCH_FLEET_INTERVAL_S``. The window opens once every guid has sent once (the first sends
are unpaced, so the opening burst is left out); a sender joins at a third of the window and
one of the first ones stops (SIGTERM: it finishes its sends and hands its guids on) at two
thirds. Printed: sends / allowed over the window and over each of its thirds (before the
join, between the join and the leave, after the leave); the gateway's interval violations,
duplicates and sends in flight at once on one guid over the whole run; and how many of the
lane topics' partitions, and of the guids on them, the group's assignment gave to another
sender at the join and at the leave (read from the group's description once it settled).
"""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka.admin import AdminClient

from bench.common import (
    CORES,
    env_int,
    gateway,
    publish_commands,
    real_infra,
    seed_items,
    stack,
    teardown,
    wait_until,
)
from pacer_sender.domain.partitions import partition_of

Owners = dict[int, str]  # partition of the batch lane topic → member id


def fleet() -> str:
    guids, senders = env_int("BENCH_FLEET_GUIDS", 40_000), env_int("BENCH_FLEET_SENDERS", 3)
    interval, seconds = env_int("BENCH_FLEET_INTERVAL_S", 120), env_int("BENCH_FLEET_SECONDS", 360)
    inf = real_infra()
    st = stack(inf, "fleet", {"PACER_SENDER_MIN_INTERVAL_MS": str(interval * 1000), "PACER_SENDER_JITTER_MS": "0",
                              "PACER_SENDER_ONLINE_RESERVE": "0", "PACER_SENDER_MAX_BUFFERED": "100000"})
    try:
        gw = st.start_gateway(min_interval_ms=interval * 1000 - 50)
        seeded = seed_items(st.infra.database_url, guids, seconds // interval + 3)
        publish_commands(inf.kafka_bootstrap, f"{st.topic_prefix}.item-commands.batch", seeded.commands)
        for n in range(senders):
            st.start_service("sender", f"sender-{n + 1}")
        if not wait_until(lambda: gateway(gw, "/_admin/stats?detail=1").get("by_guid_count", {}).__len__() >= guids,
                          900, poll_s=2.0):
            raise SystemExit("bench fleet: not every guid sent within 900 s; the fleet is short of capacity")
        admin = AdminClient({"bootstrap.servers": inf.kafka_bootstrap})
        group, topic = f"{st.topic_prefix}.sender", f"{st.topic_prefix}.item-commands.batch"
        before = _settled_owners(admin, group, topic, senders)
        sends = [gateway(gw, "/_admin/stats")["sends"]]
        t0 = time.perf_counter()
        marks = [t0]
        _sleep_until(t0 + seconds / 3)
        st.start_service("sender", "sender-joined")
        sends.append(gateway(gw, "/_admin/stats")["sends"])
        marks.append(time.perf_counter())
        joined = _settled_owners(admin, group, topic, senders + 1)
        _sleep_until(t0 + 2 * seconds / 3)
        st.stop("sender-1")
        sends.append(gateway(gw, "/_admin/stats")["sends"])
        marks.append(time.perf_counter())
        left = _settled_owners(admin, group, topic, senders)
        _sleep_until(t0 + seconds)
        stats = gateway(gw, "/_admin/stats")
        sends.append(stats["sends"])
        marks.append(time.perf_counter())
    finally:
        teardown(st)
    per_partition = Counter(partition_of(g, len(before)) for g in {c.guid for c in seeded.commands})

    def allowed(a: int, b: int) -> float:
        return guids * (marks[b] - marks[a]) / interval

    achieved = (sends[-1] - sends[0]) / allowed(0, 3)
    thirds = "/".join(f"{(sends[i + 1] - sends[i]) / allowed(i, i + 1):.3f}" for i in range(3))
    moves = [[p for p in a if a[p] != b.get(p)] for a, b in ((before, joined), (joined, left))]
    return (f"bench fleet: guids={guids} senders={senders}+1-1 interval_s={interval} seconds={seconds} "
            f"achieved_ratio={achieved:.3f} thirds={thirds} violations={stats['interval_violations']} "
            f"duplicates={stats['duplicates']} max_guid_concurrency={stats['max_concurrency_per_guid']} "
            f"partitions_moved={len(moves[0])}+{len(moves[1])}/{len(before)} "
            f"guids_moved={sum(per_partition[p] for p in moves[0])}+{sum(per_partition[p] for p in moves[1])} "
            f"cores={CORES}")


def _settled_owners(admin: AdminClient, group: str, topic: str, members: int, timeout_s: float = 120) -> Owners:
    """Which member owns each partition of ``topic``, once ``members`` members hold every
    partition once and each has taken its target assignment (the rebalance is over)."""
    owners: Owners = {}

    def settled() -> bool:
        (desc,) = [f.result() for f in admin.describe_consumer_groups([group]).values()]
        owners.clear()
        for m in desc.members:
            if m.target_assignment is not None and {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions} \
                    != {(tp.topic, tp.partition) for tp in m.target_assignment.topic_partitions}:
                return False
            for tp in m.assignment.topic_partitions:
                if tp.topic == topic:
                    if tp.partition in owners:
                        return False
                    owners[tp.partition] = m.member_id
        n = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
        return len(desc.members) == members and len(owners) == n

    if not wait_until(settled, timeout_s, poll_s=0.5):
        raise SystemExit(f"bench fleet: the group {group} did not settle on {members} members within {timeout_s:.0f} s")
    return dict(owners)


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.perf_counter()))  # the measurement window's own schedule
