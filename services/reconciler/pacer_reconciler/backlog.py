"""Bounded top-N metrics for the dashboards, refreshed by the leader every so often — never a
series per guid or per job.

``pacer_reconciler_guid_backlog_top{rank, guid}`` holds the N guids with the most queued items
(ready or scheduled), ``pacer_reconciler_guid_wait_top_seconds{rank, guid}`` the N whose oldest
ready item has waited longest, and ``pacer_reconciler_job_items_left_top`` /
``pacer_reconciler_job_done_ratio_top`` ``{rank, job_id, kind, tenant, status}`` the N open jobs
with the most items left (declared in ``metrics.py``). Every refresh replaces each set (at most
N series each, whatever the number of guids and jobs); a standby exports none.

``pacer_reconciler_events_held_back_seconds`` is the work no tail can see yet: how long the
first committed event past the server's oldest running transaction has waited (0 on a
standby, and when none waits).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from pacer_reconciler.metrics import ReconcilerMetrics
from pacer_reconciler.ports import Backlogs

log = logging.getLogger(__name__)


class BacklogGauges:
    def __init__(self, reads: Backlogs, m: ReconcilerMetrics, top_n: int) -> None:
        self.reads = reads
        self.m = m
        self.top_n = top_n

    async def refresh(self) -> None:
        m = self.m
        for gauge, sort, field in ((m.backlog_top, "backlog", "queued"), (m.wait_top, "wait", "oldest_wait_s")):
            rows = await self.reads.top(sort, self.top_n)
            gauge.clear()
            for rank, r in enumerate(rows, 1):
                gauge.labels(str(rank), r["guid"]).set(float(r[field] or 0))
        jobs = await self.reads.jobs(self.top_n)
        m.job_left_top.clear()
        m.job_done_top.clear()
        for rank, j in enumerate(jobs, 1):
            labels = (str(rank), j["job_id"], j["kind"], j["tenant"], j["status"])
            done, items = int(j["done"]), int(j["items"])
            m.job_left_top.labels(*labels).set(items - done)
            m.job_done_top.labels(*labels).set(done / items if items else 0.0)
        m.events_held_back.set(await self.reads.held_back_s())

    def forget(self) -> None:
        for gauge in (self.m.backlog_top, self.m.wait_top, self.m.job_left_top, self.m.job_done_top):
            gauge.clear()
        self.m.events_held_back.set(0)

    async def run(self, stop: asyncio.Event, leading: Callable[[], bool], every_s: float) -> None:
        while not stop.is_set():
            try:
                if leading():
                    await self.refresh()
                else:
                    self.forget()
            except Exception:  # a database down or a defect: the gauges must not stop for good
                log.exception("backlog metrics not refreshed; trying again in %gs", every_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every_s)
