"""Fault scenario: Postgres restored from a backup taken while the job ran."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, LiteralString

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from pacer_common.cli import EXIT_REFUSED
from pacer_common.kafka import UNREAD_SPECS, group_on_topic, unread
from pacer_common.settings import KafkaSettings
from pacer_dev.chaos.harness import Scenario, close_scenario, open_scenario
from pacer_dev.infra import Infra
from pacer_dev.infra.process import wait_for
from pacer_dev.stack import drop_database

if TYPE_CHECKING:
    from pacer_dev.chaos.scenarios import Size

Result = tuple[dict[str, int], tuple[str, ...]]
COPY_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 60.0


def restore(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """A backup is taken while a job runs; a second job is published after it and sending goes
    on until the database is lost with every service (kill -9). The backup is restored and the
    runbook's procedure run: `pacer rewind-groups` to the backup's moment, the planner alone
    until it has planned the second job again (`replanned`, some of whose keys were delivered
    before the restore: `replanned_sent`), `pacer after-restore`, then every service. The
    restored database shows items delivered since the backup as unsent (`sent_since_backup`);
    each is put in doubt (`put_in_doubt`), and every key must be delivered exactly once.
    Events written after the restore reuse versions of events published before it
    (`versions_rewritten`); no outcome's dedupe key may name two events (`dedupe_key_clashes`)."""
    half = max(1, size.items // 2)
    sc = open_scenario("restore", inf, root, senders=2, gateway={"latency_ms": 10})
    backup = f"{sc.db}_bk"
    try:
        first = sc.publish(half, size.guids)
        sc.wait_progress(0.4)
        _backup(sc, backup)
        backed_up_at = datetime.now(UTC)
        second = sc.publish(size.items - half, size.guids)
        sc.also.append(first)
        sc.items = size.items
        if not wait_for(lambda: _delivered(sc, second) >= (size.items - half) // 5, timeout=120):
            raise RuntimeError("the second job's sends did not start within 120 s")
        for name in [n for n in sc.stack.procs if n != "gateway"]:
            sc.stack.kill(name)
        _copy(backup, sc.db, drop_target=True)
        # A killed member stays in its group until its session times out: refused until then.
        to = backed_up_at.isoformat()
        rewind = ("rewind-groups", "--services-stopped", "--to", to)
        if not wait_for(lambda: _pacer(sc, *rewind, refused_ok=True), timeout=90):
            raise RuntimeError("the killed services' consumer group members did not leave within 90 s")
        sc.stack.start_service("planner")
        if not wait_for(lambda: _planned(sc, second) == size.items - half and not _requests_unread(sc), timeout=120):
            raise RuntimeError("the planner did not plan the second job again within 120 s")
        sc.stack.stop("planner")
        sent_since, replanned_sent = _sent_since_backup(sc), _delivered(sc, second)
        _pacer(sc, "after-restore", "--services-stopped", "--to", to, "--reason", "chaos: restored from the backup")
        with psycopg.connect(sc.db) as conn:
            row = conn.execute("SELECT count(*) FROM item_events WHERE type = 'ItemInDoubt'"
                               " AND (payload ->> 'restored')::boolean").fetchone()
        sc.stack.start_services("planner", "reconciler", ("sender", "sender-3"), ("sender", "sender-4"))
        finished = sc.wait_done(size.timeout_s)
        fig = sc.measure()
        fig["completed"] = int(finished)
        fig["sent_since_backup"] = sent_since
        fig["replanned"] = size.items - half
        fig["replanned_sent"] = replanned_sent
        fig["put_in_doubt"] = int(row[0]) if row else 0
        fig["versions_rewritten"], fig["dedupe_key_clashes"] = _outcome_keys(sc)
        return fig, ("sent_since_backup", "replanned", "replanned_sent", "put_in_doubt", "verified", "completed",
                     "versions_rewritten", "dedupe_key_clashes")
    finally:
        close_scenario(sc)
        with contextlib.suppress(psycopg.Error):
            drop_database(backup)


def _pacer(sc: Scenario, *args: str, refused_ok: bool = False) -> bool:
    """The ``pacer`` command, as an operator runs it, against this scenario's database and
    topics; False when it refused (exit 3) and ``refused_ok``."""
    env = {**os.environ, "PACER_DATABASE_URL": sc.db, "PACER_KAFKA_BOOTSTRAP_SERVERS": sc.infra.kafka_bootstrap,
           "PACER_TOPIC_PREFIX": sc.stack.topic_prefix}
    done = subprocess.run([str(Path(sys.executable).with_name("pacer")), *args], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    if refused_ok and done.returncode == EXIT_REFUSED:
        return False
    if done.returncode != 0:
        raise RuntimeError(f"pacer {args[0]} failed ({done.returncode}): {done.stderr}")
    return True


def _outcome_keys(sc: Scenario) -> tuple[int, int]:
    """Every outcome published, both before and after the restore: how many (item, version)
    pairs name two different events (written once before the restore, once after it), and
    how many ``pacer-dedupe-key`` values name two different events (a consumer deduping on it
    would have dropped one of them)."""
    events_of_version: dict[tuple[str, int], set[tuple[str, str]]] = defaultdict(set)
    events_of_key: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for headers, body in _read_all(sc.infra.kafka_bootstrap, f"{sc.stack.topic_prefix}.item-outcomes"):
        ev = json.loads(body)
        event = (ev["type"], ev["occurred_at"])
        events_of_version[(ev["item_id"], ev["version"])].add(event)
        events_of_key[headers["pacer-dedupe-key"]].add(event)
    return (sum(len(e) > 1 for e in events_of_version.values()), sum(len(e) > 1 for e in events_of_key.values()))


def _read_all(bootstrap: str, topic: str) -> Iterator[tuple[dict[str, str], bytes]]:
    """Every message of ``topic`` up to its end as it is now: headers and value."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        todo = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while todo:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: partitions {sorted(todo)} not read to their end in {READ_TIMEOUT_S:.0f} s")
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            raw = msg.headers() or []
            pairs = raw.items() if isinstance(raw, dict) else raw
            yield {k: v.decode() for k, v in pairs if isinstance(v, bytes)}, msg.value() or b""
            if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                todo.discard(msg.partition() or 0)
    finally:
        consumer.close()


def _requests_unread(sc: Scenario) -> int:
    """Job requests the planners' group has not committed yet (the runbook's lag of 0)."""
    k = KafkaSettings(kafka_bootstrap_servers=sc.infra.kafka_bootstrap, topic_prefix=sc.stack.topic_prefix)
    g = group_on_topic(k.client_config(), f"{k.topic_prefix}.planner", k.job_requests, UNREAD_SPECS)
    return sum(end - at for at, end in unread(g).values())


def _planned(sc: Scenario, request_id: str) -> int:
    with psycopg.connect(sc.db) as conn:
        row = conn.execute("SELECT count(*) FROM items i JOIN jobs j USING (job_id) WHERE j.request_id = %s",
                           (request_id,)).fetchone()
    return int(row[0]) if row else 0


def _backup(sc: Scenario, backup: str) -> None:
    """A copy of the database as it is at one moment, as an online backup sees it: the
    services are frozen and their connections cut (their open transactions roll back) while
    the copy is made, then go on, reconnecting."""
    services = [n for n in sc.stack.procs if n != "gateway"]
    for name in services:
        sc.stack.signal(name, signal.SIGSTOP)
    try:
        _copy(sc.db, backup, drop_target=False)
    finally:
        for name in services:
            sc.stack.signal(name, signal.SIGCONT)


def _copy(source_url: str, target_url: str, *, drop_target: bool) -> None:
    """``target`` (on the same server) becomes a copy of ``source``: a template copy, which
    no session may be connected to, so its backends are ended until none is left."""
    base, _, source = source_url.rpartition("/")
    target = target_url.rpartition("/")[2]
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if drop_target:
            conn.execute(f"DROP DATABASE IF EXISTS {target} WITH (FORCE)")

        def copied() -> bool:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (source,))
            try:
                conn.execute(f"CREATE DATABASE {target} TEMPLATE {source}")
            except psycopg.errors.ObjectInUse:
                return False  # a backend just ended is still leaving
            return True

        if not wait_for(copied, timeout=COPY_TIMEOUT_S):
            raise RuntimeError(f"{source} still had sessions after {COPY_TIMEOUT_S:.0f} s: no copy made")


def _sent_since_backup(sc: Scenario) -> int:
    """Keys the gateway delivered whose items the restored database does not show confirmed."""
    return len(_keys(sc, sc.request_ids, "i.status <> 'confirmed'") & _gateway_keys(sc))


def _delivered(sc: Scenario, request_id: str) -> int:
    """Keys of one job's items the gateway delivered."""
    return len(_keys(sc, [request_id], "true") & _gateway_keys(sc))


def _keys(sc: Scenario, request_ids: list[str], where: LiteralString) -> set[str]:
    with psycopg.connect(sc.db) as conn:
        return {k for (k,) in conn.execute(
            "SELECT i.idem_key FROM items i JOIN jobs j USING (job_id) WHERE j.request_id = ANY(%s) AND " + where,
            (request_ids,)).fetchall()}


def _gateway_keys(sc: Scenario) -> set[str]:
    delivered: set[str] = set()
    offset = 0
    while page := sc.gateway(f"/_admin/sends?limit=5000&offset={offset}")["sends"]:
        delivered.update(s["idempotencyKey"] for s in page)
        offset += len(page)
    return delivered


RESTORE_SCENARIOS = {"restore": restore}
