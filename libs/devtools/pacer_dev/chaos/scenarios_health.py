"""Fault scenario of guid lifecycles: accounts kicked, offline or unauthorized mid-campaign,
then back, with their device.status callbacks repeated and out of order."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from pacer_common.kafka import make_producer, produce_all
from pacer_dev.chaos.harness import Scenario, close_scenario, open_scenario
from pacer_dev.infra import Infra

if TYPE_CHECKING:
    from pacer_dev.chaos.scenarios import Result, Size

OUT = ("offline", "kicked", "unauthorized")
# Each held spell of a guid in Pacer: from the change that held it to the next change to online.
SPELLS = """
SELECT h.guid, extract(epoch FROM h.at), extract(epoch FROM COALESCE(
    (SELECT min(n.at) FROM guid_state_history n WHERE n.guid = h.guid AND n.id > h.id AND n.state = 'online'),
    now()))
FROM guid_state_history h WHERE h.state <> 'online'
"""


def _callbacks(sc: Scenario, guids: list[str], now: datetime) -> None:
    """``online`` for each guid, twice, and a stale ``kicked`` from before, in one batch."""
    topic = f"{sc.stack.topic_prefix}.callbacks"

    def body(guid: str, status: str, ts: datetime) -> bytes:
        return json.dumps({"cmd": "device.status", "guid": guid, "ts": ts.isoformat(),
                           "data": {"status": status}}).encode()

    msgs = [(topic, g.encode(), v, None) for g in guids
            for v in (body(g, "online", now), body(g, "kicked", now - timedelta(minutes=10)), body(g, "online", now))]
    produce_all(make_producer({"bootstrap.servers": sc.infra.kafka_bootstrap}), msgs)


def guid_kicks(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """Again and again, a quarter of the guids go out at the gateway (their sends are refused
    with the state's code) and come back a few seconds later with an ``online`` callback (plus
    a duplicate and a stale ``kicked``). Pacer must hold each guid from its first refusal until
    the callback (no send accepted in between), resume it by itself, and lose or double nothing."""
    sc = open_scenario("guid-kicks", inf, root, senders=2, gateway={"latency_ms": 5},
                       env={"PACER_SENDER_MIN_INTERVAL_MS": "100", "PACER_SENDER_SWEEP_S": "2"})
    try:
        sc.publish(size.items, size.guids)
        sc.wait_progress(0.05)
        guids = [f"{sc.name}-g{i:03d}" for i in range(size.guids)]
        kicks = 0
        while sc.progress()[1] < sc.items * 0.8:
            victims = rng.sample(guids, k=max(1, len(guids) // 4))
            for g in victims:
                sc.gateway(f"/_admin/devices/{g}", {"status": rng.choice(OUT)}, "PUT")
            kicks += len(victims)
            time.sleep(rng.uniform(1.5, 3.0))  # chaos cadence: the senders meet the refusals
            for g in victims:
                sc.gateway(f"/_admin/devices/{g}", {"status": "online"}, "PUT")
            _callbacks(sc, victims, datetime.now(UTC))
            time.sleep(rng.uniform(0.5, 1.5))
        done = sc.wait_done(size.timeout_s)
        figures = sc.measure()
        figures["completed"] = int(done)
        figures["kicks"] = kicks
        sends: dict[str, list[float]] = {}
        offset = 0
        while page := sc.gateway(f"/_admin/sends?limit=5000&offset={offset}")["sends"]:
            for s in page:
                sends.setdefault(s["guid"], []).append(float(s["at"]))
            offset += len(page)
        with psycopg.connect(sc.db) as conn:
            spells = conn.execute(SPELLS).fetchall()
            figures["holds"] = len(spells)
            figures["resumed"] = int(conn.execute(
                "SELECT count(*) FROM guid_state_history WHERE state = 'online' AND source = 'callback'"
                " AND previous IS NOT NULL").fetchone()[0])
            figures["still_held"] = int(conn.execute(
                "SELECT count(*) FROM guid_states WHERE state <> 'online'").fetchone()[0])
        figures["sent_while_held"] = sum(1 for g, start, end in spells for at in sends.get(g, ())
                                         if float(start) < at < float(end))
        return figures, ("kicks", "holds", "resumed", "still_held", "sent_while_held", "violations", "completed")
    finally:
        close_scenario(sc)


HEALTH_SCENARIOS: dict[str, Callable[[Infra, Path, Size, random.Random], Result]] = {
    "guid-kicks": guid_kicks,
}
