"""Fault scenario of the callback path: the gateway's callbacks to the real intake duplicated,
late, out of order and lost, under a media campaign and guids going out and coming back."""

from __future__ import annotations

import json
import random
import time
import uuid
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

FAULTS = {"p_duplicate": 0.3, "p_lost": 0.25, "p_reorder": 0.3, "late_ms": 200, "late_jitter_ms": 1500,
          "reorder_hold_ms": 1500,
          # Besides chance faults, the first two ``media.ready`` are lost for sure (a short run
          # has few uploads, and the poll that makes up for a lost one must be seen to happen),
          # and the first ``device.status`` posted twice and held back: a short run posts about
          # sixteen callbacks, none of them duplicated in about one run of 300 (0.7 ** 16).
          "lose_next": {"media.ready": 2}, "duplicate_next": {"device.status": 1},
          "reorder_next": {"device.status": 1}}
IMAGES = 3  # distinct images in the campaign: one upload per image per guid


def callbacks(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """An image campaign whose uploads become ready 1.5 s later, announced by ``media.ready``
    callbacks; meanwhile guids go offline at the gateway and come back with ``device.status``
    callbacks (re-reported, as a gateway does). Every callback goes through the real intake
    with the faults above. Pacer must send every item once, never into media that is not ready
    (a lost ``media.ready`` is made up for by polling ``/media/status``), and hold and resume
    guids in event order whatever order the callbacks arrive in."""
    sc = open_scenario("callbacks", inf, root, senders=2, gateway={"latency_ms": 5},
                       env={"PACER_SENDER_MIN_INTERVAL_MS": "50", "PACER_SENDER_SWEEP_S": "2",
                            "PACER_SENDER_MEDIA_POLL_AFTER_S": "4", "PACER_SENDER_MEDIA_POLL_EVERY_S": "2"})
    try:
        sc.stack.start_intake()
        sc.gateway("/_admin/callbacks", FAULTS, "PUT")
        sc.gateway("/_admin/actions", {"media_ready_after_ms": 1500}, "PUT")
        guids = [f"{sc.name}-g{i:03d}" for i in range(size.guids)]
        _publish_images(sc, size.items, guids)
        sc.wait_progress(0.05)
        outs = 0
        while sc.progress()[1] < sc.items * 0.7:
            victims = rng.sample(guids, k=max(1, len(guids) // 4))
            for g in victims:
                sc.gateway(f"/_admin/devices/{g}", {"status": rng.choice(("offline", "kicked"))}, "PUT")
            outs += len(victims)
            time.sleep(rng.uniform(1.0, 2.5))  # chaos cadence: the senders meet the refusals
            for _ in range(3):  # back online, re-reported: some reports are lost, some late
                for g in victims:
                    sc.gateway(f"/_admin/devices/{g}", {"status": "online"}, "PUT")
                time.sleep(0.7)
        # A guid whose every "online" report was lost stays held, as it should: the gateway
        # reports it again until Pacer has it.
        deadline = time.monotonic() + size.timeout_s
        while time.monotonic() < deadline and sc.progress()[1] < sc.items:
            for g in _held(sc.db):
                sc.gateway(f"/_admin/devices/{g}", {"status": "online"}, "PUT")
            time.sleep(2.0)
        done = sc.wait_done(30)
        figures = sc.measure()
        figures["completed"] = int(done)
        counts = sc.gateway("/_admin/callbacks")["counts"]
        actions = sc.gateway("/_admin/actions")
        figures |= {"outs": outs, "callbacks_lost": int(counts.get("lost", 0)),
                    "callbacks_duplicated": int(counts.get("duplicated", 0)),
                    "callbacks_reordered": int(counts.get("reordered", 0)),
                    "callbacks_late": int(counts.get("late", 0)),
                    "sends_unready": int(actions["sends_unready"]), "status_polls": int(actions["status_polls"]),
                    "uploads": int(actions["uploads"]), "still_held": len(_held(sc.db))}
        return figures, ("outs", "callbacks_lost", "callbacks_duplicated", "callbacks_reordered", "callbacks_late",
                         "uploads", "status_polls", "sends_unready", "still_held", "violations", "completed")
    finally:
        close_scenario(sc)


def _publish_images(sc: Scenario, items: int, guids: list[str]) -> None:
    rid = f"chaos-{sc.name}-{uuid.uuid4().hex[:8]}"
    targets = [{"guid": guids[i % len(guids)], "to_id": f"room-{i:06d}"} for i in range(items)]
    # One job per image (a job carries one message); together they are the scenario's items.
    per = [targets[k::IMAGES] for k in range(IMAGES)]
    producer = make_producer({"bootstrap.servers": sc.infra.kafka_bootstrap})
    ids = []
    for k, chunk in enumerate(per):
        request_id = f"{rid}-{k}"
        body = json.dumps({
            "request_id": request_id, "kind": "campaign", "created_by": "chaos", "content_version": 1,
            "message": {"type": "image", "url": f"https://cdn.example.com/chaos/poster-{k}.png"},
            "targets": {"mode": "snapshot", "items": chunk},
            "expire_at": (datetime.now(UTC) + timedelta(hours=2)).isoformat()}).encode()
        produce_all(producer, [(f"{sc.stack.topic_prefix}.job-requests", request_id.encode(), body, None)])
        ids.append(request_id)
    sc.request_id, sc.also, sc.items = ids[0], ids[1:], items


def _held(db: str) -> list[str]:
    with psycopg.connect(db) as conn:
        return [str(r[0]) for r in conn.execute("SELECT guid FROM guid_states WHERE state <> 'online'").fetchall()]


CALLBACK_SCENARIOS: dict[str, Callable[[Infra, Path, Size, random.Random], Result]] = {
    "callbacks": callbacks,
}
