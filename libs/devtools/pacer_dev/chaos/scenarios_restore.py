"""Fault scenario: Postgres restored from a backup taken while the job ran."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from pacer_dev.chaos.harness import Scenario, close_scenario, open_scenario
from pacer_dev.infra import Infra
from pacer_dev.stack import drop_database

if TYPE_CHECKING:
    from pacer_dev.chaos.scenarios import Size

Result = tuple[dict[str, int], tuple[str, ...]]
COPY_TIMEOUT_S = 30.0


def restore(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """A backup is taken while the job runs; the job goes on until the database is lost
    with every service (kill -9), and the backup is restored. It shows pending, claimed and
    submitted items that were sent after it (`sent_since_backup`). `pacer after-restore` puts
    what it cannot vouch for in doubt (`put_in_doubt`); the services start again and must
    deliver every item exactly once."""
    sc = open_scenario("restore", inf, root, senders=2, gateway={"latency_ms": 10})
    backup = f"{sc.db}_bk"
    try:
        sc.publish(size.items, size.guids)
        sc.wait_progress(0.2)
        _backup(sc, backup)
        sc.wait_progress(0.6)
        for name in [n for n in sc.stack.procs if n != "gateway"]:
            sc.stack.kill(name)
        _copy(sc.db, backup, sc.db, drop_target=True)
        sent_since = _sent_since_backup(sc)
        done = subprocess.run(
            [str(Path(sys.executable).with_name("pacer")), "after-restore", "--services-stopped",
             "--reason", "chaos: restored from the backup"],
            env={**os.environ, "PACER_DATABASE_URL": sc.db}, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pacer after-restore failed ({done.returncode}): {done.stderr}")
        with psycopg.connect(sc.db) as conn:
            row = conn.execute("SELECT count(*) FROM item_events WHERE type = 'ItemInDoubt'"
                               " AND (payload ->> 'restored')::boolean").fetchone()
        sc.stack.start_services("planner", "reconciler", ("sender", "sender-3"), ("sender", "sender-4"))
        finished = sc.wait_done(size.timeout_s)
        fig = sc.measure()
        fig["completed"] = int(finished)
        fig["sent_since_backup"] = sent_since
        fig["put_in_doubt"] = int(row[0]) if row else 0
        return fig, ("sent_since_backup", "put_in_doubt", "verified", "takeovers", "completed")
    finally:
        close_scenario(sc)
        with contextlib.suppress(psycopg.Error):
            drop_database(backup)


def _backup(sc: Scenario, backup: str) -> None:
    """A copy of the database as it is at one moment, as an online backup sees it: the
    services are frozen and their connections cut (their open transactions roll back) while
    the copy is made, then go on, reconnecting."""
    services = [n for n in sc.stack.procs if n != "gateway"]
    for name in services:
        sc.stack.signal(name, signal.SIGSTOP)
    try:
        _copy(sc.db, sc.db, backup, drop_target=False)
    finally:
        for name in services:
            sc.stack.signal(name, signal.SIGCONT)


def _copy(any_url: str, source_url: str, target_url: str, *, drop_target: bool) -> None:
    """``target`` becomes a copy of ``source`` (a template copy; no session may be connected
    to either, so their backends are ended first)."""
    base = any_url.rsplit("/", 1)[0]
    source, target = source_url.rsplit("/", 1)[1], target_url.rsplit("/", 1)[1]
    deadline = time.monotonic() + COPY_TIMEOUT_S
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if drop_target:
            conn.execute(f"DROP DATABASE IF EXISTS {target} WITH (FORCE)")
        while True:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (source,))
            try:
                conn.execute(f"CREATE DATABASE {target} TEMPLATE {source}")
                return
            except psycopg.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)  # a backend just ended is still leaving


def _sent_since_backup(sc: Scenario) -> int:
    """Keys the gateway delivered whose items the restored database does not show confirmed."""
    with psycopg.connect(sc.db) as conn:
        unsent = {k for (k,) in conn.execute(
            "SELECT i.idem_key FROM items i JOIN jobs j USING (job_id) WHERE j.request_id = ANY(%s)"
            " AND i.status <> 'confirmed'", (sc.request_ids,)).fetchall()}
    delivered: set[str] = set()
    offset = 0
    while page := sc.gateway(f"/_admin/sends?limit=5000&offset={offset}")["sends"]:
        delivered.update(s["idempotencyKey"] for s in page)
        offset += len(page)
    return len(unsent & delivered)


RESTORE_SCENARIOS = {"restore": restore}
