"""``bench fleet``: several sender processes in one group over many slow guids, one added and
one removed mid-run.

Every guid holds more items than the window can send, paced at one send per
``BENCH_FLEET_INTERVAL_S``. The window opens once every guid has sent once (the first sends
are unpaced, so the opening burst is left out); a sender joins at a third of the window and
one of the first ones stops (SIGTERM: it finishes its sends and hands its guids on) at two
thirds. Printed: sends / allowed over the window; the gateway's interval violations,
duplicates and sends in flight at once on one guid over the whole run, and how many guids changed owner.
"""

from __future__ import annotations

import time

from bench.common import (
    CORES,
    count,
    env_int,
    gateway,
    publish_commands,
    real_infra,
    seed_items,
    stack,
    teardown,
    wait_until,
)


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
        start = gateway(gw, "/_admin/stats")["sends"]
        t0 = time.perf_counter()
        _sleep_until(t0 + seconds / 3)
        st.start_service("sender", "sender-joined")
        _sleep_until(t0 + 2 * seconds / 3)
        st.stop("sender-1")
        _sleep_until(t0 + seconds)
        stats = gateway(gw, "/_admin/stats")
        elapsed = time.perf_counter() - t0
        moved = count(st.infra.database_url, "SELECT count(*) FROM guid_leases WHERE epoch > 1")
    finally:
        teardown(st)
    achieved = (stats["sends"] - start) / (guids * elapsed / interval)
    return (f"bench fleet: guids={guids} senders={senders}+1-1 interval_s={interval} seconds={seconds} "
            f"achieved_ratio={achieved:.3f} violations={stats['interval_violations']} "
            f"duplicates={stats['duplicates']} max_guid_concurrency={stats['max_concurrency_per_guid']} "
            f"guids_moved={moved} cores={CORES}")


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.perf_counter()))  # the measurement window's own schedule
