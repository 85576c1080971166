"""The paced workload of ``bench pacing`` and ``bench peer``: many guids, about one send per second each."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.common import gateway, publish_commands, real_infra, seed_items, stack, teardown, wait_until

INTERVAL_S, JITTER_S = 0.9, 0.2  # a gap of 0.9 s + uniform 0–0.2 s: mean 1.0 s
GATEWAY_MIN_INTERVAL_MS = int(INTERVAL_S * 1000) - 5  # the gateway counts a shorter gap as a violation


def per_guid(seconds: int) -> int:
    """Messages waiting on each guid: more than the window can send, so no guid runs dry."""
    return int(seconds * 1.2) + 5


def allowed(guids: int, seconds: float) -> float:
    """Sends the pacing allows over ``seconds``, at the mean gap."""
    return guids * seconds / (INTERVAL_S + JITTER_S / 2)


@dataclass(frozen=True)
class Window:
    """What the fake gateway saw: sends over the window, violations and duplicates over the run."""

    sends: int
    seconds: float
    violations: int
    duplicates: int

    @property
    def per_s(self) -> float:
        return self.sends / self.seconds


def measure(gateway_url: str, seconds: int) -> Window:
    """Wait for the first send, then count the gateway's sends over ``seconds``."""
    if not wait_until(lambda: gateway(gateway_url, "/_admin/stats")["sends"] > 0, 120):
        raise SystemExit("bench pacing/peer: 0 sends at the gateway within 120 s; the window opens at the first")
    start = gateway(gateway_url, "/_admin/stats")["sends"]
    t0 = time.perf_counter()
    time.sleep(seconds)  # the measurement window itself
    stats = gateway(gateway_url, "/_admin/stats")
    elapsed = time.perf_counter() - t0
    return Window(stats["sends"] - start, elapsed, stats["interval_violations"], stats["duplicates"])


def pacer_window(guids: int, seconds: int, label: str) -> Window:
    """One Pacer sender process on ``guids`` paced guids, items seeded and their commands produced first."""
    inf = real_infra()
    st = stack(inf, label, {"PACER_SENDER_MIN_INTERVAL_MS": str(int(INTERVAL_S * 1000)),
                            "PACER_SENDER_JITTER_MS": str(int(JITTER_S * 1000)), "PACER_SENDER_ONLINE_RESERVE": "0",
                            "PACER_SENDER_MAX_BUFFERED": "50000", "PACER_SENDER_DB_POOL_MAX": "40"})
    try:
        gw = st.start_gateway(min_interval_ms=GATEWAY_MIN_INTERVAL_MS)
        seeded = seed_items(st.infra.database_url, guids, per_guid(seconds))
        publish_commands(inf.kafka_bootstrap, f"{st.topic_prefix}.item-commands.batch", seeded.commands)
        st.start_service("sender", "sender-1")
        return measure(gw, seconds)
    finally:
        teardown(st)
