"""Requery jobs under planner faults: the paging planner killed again and again mid-paging
(``requery-kills``), or frozen with a page on its way and woken once another planner has the
job (``requery-zombie``)."""

from __future__ import annotations

import random
import signal
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from pacer_dev.chaos.harness import Scenario, close_scenario, open_scenario
from pacer_dev.infra import Infra
from pacer_dev.infra.process import wait_for

if TYPE_CHECKING:
    from pacer_dev.chaos.scenarios import Result, Size

PAGE_SIZE = 100
# Pages wait for admission (no guid past a few queued items), so paging lasts as long as the
# sending; a dead planner's paging lease lapses within seconds and another planner takes it.
REQUERY_ENV = {
    "PACER_SENDER_MIN_INTERVAL_MS": "150",
    "PACER_PLANNER_MAX_BACKLOG_PER_GUID": "5",
    "PACER_PLANNER_REQUERY_ADMISSION_WAIT_S": "0.3",
    "PACER_PLANNER_REQUERY_LEASE_S": "2",
    "PACER_PLANNER_REQUERY_SWEEP_S": "0.5",
    "PACER_PLANNER_REQUERY_BACKOFF_INITIAL_S": "0.05",
    "PACER_PLANNER_REQUERY_BACKOFF_MAX_S": "0.5",
}
# Paging as fast as the audience answers (no admission waits): a page in a frozen planner's
# hands is then always tried against the job, never put off for admission.
ZOMBIE_ENV = {k: v for k, v in REQUERY_ENV.items() if k != "PACER_PLANNER_MAX_BACKLOG_PER_GUID"}
PAGING = "SELECT target_complete_at IS NULL, target_pages FROM jobs WHERE request_id = %s"
PAGING_OWNER = "SELECT target_owner, target_pages FROM jobs WHERE request_id = %s"
# The job's pages in order, each starting where the one before it stopped: the pages that do not.
PAGES_BROKEN = """
SELECT count(*) FROM (
    SELECT p.page_no, p.cursor_in, lag(p.cursor_out) OVER w AS before, row_number() OVER w AS n
    FROM job_target_pages p JOIN jobs j USING (job_id)
    WHERE j.request_id = %s
    WINDOW w AS (ORDER BY p.page_no)
) x
WHERE x.page_no <> x.n OR x.cursor_in IS DISTINCT FROM x.before
"""
TARGETS_STORED = """
SELECT count(DISTINCT (i.guid, i.to_id)) FROM items i JOIN jobs j USING (job_id) WHERE j.request_id = %s
"""


def _paging(sc: Scenario) -> tuple[bool, int]:
    """(still paging, pages stored) of the scenario's job; (True, 0) before it exists."""
    with psycopg.connect(sc.db) as conn:
        row = conn.execute(PAGING, (sc.request_id,)).fetchone()
    return (True, 0) if row is None else (bool(row[0]), int(row[1]))


def _paged_to(sc: Scenario, pages: int) -> bool:
    """The job has ``pages`` pages stored, or paging is over."""
    paging, stored = _paging(sc)
    return not paging or stored >= pages


def _finish_paged(sc: Scenario, size: Size) -> dict[str, int]:
    """The scenario's figures once its job is done, with its pages': ``pages``, ``pages_broken``
    (not following the one before cursor to cursor) and ``targets_missing``."""
    done = sc.wait_done(size.timeout_s)
    fig = sc.measure()
    fig["completed"] = int(done)
    with psycopg.connect(sc.db) as conn:
        fig["pages"] = _paging(sc)[1]
        fig["pages_broken"] = int(conn.execute(PAGES_BROKEN, (sc.request_id,)).fetchone()[0])
        fig["targets_missing"] = size.items - int(conn.execute(TARGETS_STORED, (sc.request_id,)).fetchone()[0])
    return fig


def requery_kills(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """A requery job over an audience of ``size.items`` targets, paged while it sends, its
    planner killed -9 mid-paging again and again and a new one started each time; the new
    planner takes the paging lease over once it lapses. Every target must become one item,
    sent once; the pages must follow each other cursor to cursor; and pages storing items
    while the reconciler completes and reopens their shards must never deadlock with it."""
    sc = open_scenario("requery-kills", inf, root, senders=2, env=REQUERY_ENV)
    try:
        audience = f"chaos-{uuid.uuid4().hex[:8]}"
        sc.gateway(f"/_admin/audiences/{audience}", {"targets": sc.targets(size.items, size.guids)}, method="PUT")
        sc.publish_targets({"mode": "requery", "url": f"{sc.stack.gateway_url}/_audience/{audience}",
                            "page_size": PAGE_SIZE}, size.items)
        wanted = max(2, size.kills // 5)
        kills = killed_while_paging = 0
        last_pages = 0
        deadline = time.monotonic() + size.timeout_s / 2
        while kills < wanted:
            # Until the live planner has stored one or two more pages (the kill then lands
            # somewhere in the next one), or paging is over.
            target = last_pages + rng.randint(1, 2)
            if not wait_for(partial(_paged_to, sc, target), timeout=max(0.0, deadline - time.monotonic())):
                break
            if not _paging(sc)[0]:
                break
            killed_while_paging += 1
            sc.stack.kill(next(n for n in sc.stack.procs if n.startswith("planner")))
            kills += 1
            last_pages = _paging(sc)[1]
            sc.stack.start_service("planner", f"planner-{kills + 1}", wait=False)
        fig = _finish_paged(sc, size)
        fig["planner_kills"] = kills
        fig["killed_while_paging"] = killed_while_paging
        return fig, ("planner_kills", "killed_while_paging", "pages", "pages_broken", "targets_missing", "completed")
    finally:
        close_scenario(sc)


def _owner(sc: Scenario) -> tuple[str | None, int]:
    """(the paging lease's owner, pages stored) of the scenario's job."""
    with psycopg.connect(sc.db) as conn:
        row = conn.execute(PAGING_OWNER, (sc.request_id,)).fetchone()
    return (None, 0) if row is None else (row[0], int(row[1]))


def _taken_over(sc: Scenario, zombie_owner: str, pages: int) -> bool:
    """While the zombie sleeps: another planner holds the job's paging lease and has stored a
    page past ``pages``, or has finished paging."""
    owner, stored = _owner(sc)
    return not _paging(sc)[0] or (owner not in (None, zombie_owner) and stored > pages)


def requery_zombie(inf: Infra, root: Path, size: Size, rng: random.Random) -> Result:
    """Two planners; the one paging a requery job is frozen (SIGSTOP) while the audience
    holds its next page, and the page is answered while it sleeps. Its paging lease lapses,
    the other planner takes the job over and stores that page and more; then the frozen one
    wakes (SIGCONT) with the stale page in hand. It must keep nothing of it: every target one
    item, sent once; the pages cursor to cursor; and the woken planner counting the page lost."""
    sc = open_scenario("requery-zombie", inf, root, senders=2, env=ZOMBIE_ENV)
    try:
        sc.stack.start_service("planner", "planner-2")
        audience = f"chaos-{uuid.uuid4().hex[:8]}"
        admin = f"/_admin/audiences/{audience}"
        sc.gateway(admin, {"targets": sc.targets(size.items, size.guids)}, method="PUT")
        frozen_at = rng.randint(1, max(1, min(3, size.items // PAGE_SIZE - 2)))
        sc.gateway(f"{admin}/hold", {"hold_next": 1, "after_pages": frozen_at}, method="PUT")
        sc.publish_targets({"mode": "requery", "url": f"{sc.stack.gateway_url}/_audience/{audience}",
                            "page_size": PAGE_SIZE}, size.items)
        if not wait_for(lambda: sc.gateway(admin)["held"] == 1, timeout=size.timeout_s / 4):
            raise RuntimeError(f"no planner asked for page {frozen_at + 1}; see {sc.stack.state_dir}/logs")
        owner, pages = _owner(sc)
        zombie = next(n for n, p in sc.stack.procs.items() if n.startswith("planner") and f":{p.pid}:" in (owner or ""))
        sc.stack.signal(zombie, signal.SIGSTOP)
        sc.gateway(f"{admin}/release", method="POST")  # the page reaches a planner that sleeps
        taken = wait_for(partial(_taken_over, sc, owner or "", pages), timeout=size.timeout_s / 4)
        sc.stack.signal(zombie, signal.SIGCONT)

        def lost() -> float:
            return sc.stack.metric(zombie, "pacer_planner_target_pages_lost_total") or 0.0

        wait_for(lambda: lost() >= 1, timeout=30)
        fig = _finish_paged(sc, size)
        fig["frozen_at_page"] = pages
        fig["taken_over"] = int(taken)
        fig["zombie_pages_lost"] = int(lost())
        return fig, ("frozen_at_page", "taken_over", "zombie_pages_lost", "pages", "pages_broken", "targets_missing",
                     "completed")
    finally:
        close_scenario(sc)


REQUERY_SCENARIOS: dict[str, Callable[[Infra, Path, Size, random.Random], Result]] = {
    "requery-kills": requery_kills,
    "requery-zombie": requery_zombie,
}
