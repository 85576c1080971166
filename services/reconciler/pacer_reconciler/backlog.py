"""Bounded backlog metrics for the dashboards: the top-N guids by queued work and by the
oldest wait, refreshed by the leader every so often — never a series per guid.

``pacer_reconciler_guid_backlog_top{rank, guid}`` holds the N guids with the most queued items
(ready or scheduled), ``pacer_reconciler_guid_wait_top_seconds{rank, guid}`` the N whose oldest
ready item has waited longest (declared in ``metrics.py``). Every refresh replaces the set (at most N series each, whatever the number
of guids); a standby exports none.

``pacer_reconciler_events_held_back_seconds`` is the work no tail can see yet: how long the
first committed event past the server's oldest running transaction has waited (0 on a
standby, and when none waits).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import Gauge

log = logging.getLogger(__name__)
Read = Callable[[str, int], Awaitable[list[dict[str, Any]]]]  # (sort, limit) → rows of guid_backlogs.sql
HeldBack = Callable[[], Awaitable[float]]  # seconds the first event the tails cannot read has waited


class BacklogGauges:
    def __init__(self, read: Read, backlog: Gauge, wait: Gauge, top_n: int,
                 held_back: HeldBack, held_back_s: Gauge) -> None:
        self.read = read
        self.top_n = top_n
        self.backlog = backlog
        self.wait = wait
        self.read_held_back = held_back
        self.held_back_s = held_back_s

    async def refresh(self) -> None:
        for gauge, sort, field in ((self.backlog, "backlog", "queued"), (self.wait, "wait", "oldest_wait_s")):
            rows = await self.read(sort, self.top_n)
            gauge.clear()
            for rank, r in enumerate(rows, 1):
                gauge.labels(str(rank), r["guid"]).set(float(r[field] or 0))
        self.held_back_s.set(await self.read_held_back())

    async def run(self, stop: asyncio.Event, leading: Callable[[], bool], every_s: float) -> None:
        while not stop.is_set():
            try:
                if leading():
                    await self.refresh()
                else:
                    self.backlog.clear()
                    self.wait.clear()
                    self.held_back_s.set(0)
            except Exception:  # a database down or a defect: the gauges must not stop for good
                log.exception("backlog metrics not refreshed; trying again in %gs", every_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every_s)
