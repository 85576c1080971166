"""Intake scenarios: what a publisher sends cannot stall the planner.

``poison-requests``: every kind of hostile job request (``pacer_dev.hostile``: NUL
characters, lone surrogates, numbers past a column, messages and keys past their limits,
pathological JSON, naive and expired timestamps) published on one partition, interleaved
with a campaign and auto-replies and ahead of them. Every valid request must be planned and
delivered once, every hostile one dead-lettered with a reason, and the planner must never
exit.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, TopicPartition

from pacer_common.domain.dead_letters import REASON_HEADER
from pacer_common.kafka import make_producer, produce_all
from pacer_dev.chaos.harness import close_scenario, open_scenario
from pacer_dev.hostile import BUILDERS, base, hostile
from pacer_dev.infra import Infra

if TYPE_CHECKING:
    from pacer_dev.chaos.scenarios import Size

REPLIES = 10
KEY = b"one-partition"  # every request on the same partition of the request topic


def poison_requests(inf: Infra, root: Path, size: Size, rng: random.Random) -> tuple[dict[str, int], tuple[str, ...]]:
    from pacer_dev.chaos.scenarios import _finish  # that module registers this one

    sc = open_scenario("poison-requests", inf, root, senders=2)
    try:
        run = uuid.uuid4().hex[:8]
        campaign = base(f"chaos-poison-campaign-{run}", n=size.items)
        for i, target in enumerate(campaign["targets"]["items"]):
            target["guid"] = f"poison-g{i % size.guids:03d}"
        replies = [base(f"chaos-poison-reply-{run}-{n}", kind="auto_reply", guid=f"poison-g{n % size.guids:03d}")
                   for n in range(REPLIES)]
        valid = [json.dumps(d).encode() for d in (campaign, *replies)]
        kinds = sorted(BUILDERS)
        poison = [hostile(kind, f"chaos-poison-{kind}-{run}", rng.choice(["", "é", "{x}", "😀"])) for kind in kinds]
        # The first hostile requests ahead of all the valid work, the rest in between.
        ahead = len(poison) // 2
        order = poison[:ahead]
        rest = poison[ahead:]
        for body in valid:
            order.append(body)
            if rest:
                order.append(rest.pop(0))
        order += rest
        produce_all(make_producer({"bootstrap.servers": inf.kafka_bootstrap}),
                    [(f"{sc.stack.topic_prefix}.job-requests", KEY, body, None) for body in order])
        sc.request_id, sc.also = campaign["request_id"], [r["request_id"] for r in replies]
        sc.items = size.items + REPLIES
        fig = _finish(sc, size)
        reasons = _dead_letters(inf.kafka_bootstrap, f"{sc.stack.topic_prefix}.job-requests.dlq", set(poison))
        fig["poisoned"] = len(poison)
        fig["dead_lettered"] = sum(1 for body in poison if reasons.get(body))  # each with a reason
        fig["planner_exited"] = int(not sc.stack.procs["planner"].alive())
        return fig, ("poisoned", "dead_lettered", "jobs", "planner_exited", "completed")
    finally:
        close_scenario(sc)


def _dead_letters(bootstrap: str, topic: str, expect: set[bytes], timeout_s: float = 60.0) -> dict[bytes, str]:
    """Original bytes → reason header, for the records of ``expect`` in the dead-letter topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-dlq-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: dict[bytes, str] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while not expect <= found.keys() and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            headers = dict(msg.headers() or [])
            found[msg.value() or b""] = _text(headers.get(REASON_HEADER))
    finally:
        consumer.close()
    return found


INTAKE_SCENARIOS: dict[str, Callable[..., Any]] = {"poison-requests": poison_requests}


def _text(header: str | bytes | None) -> str:
    """A header's text: headers read back from Kafka are bytes, or absent."""
    if isinstance(header, bytes):
        return header.decode(errors="replace")
    return header or ""
