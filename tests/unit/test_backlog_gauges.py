"""Backlog metrics stay bounded: the top-N guids and jobs, replaced on every refresh, none on a
standby; the events held back, from the leader alone."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from pacer_reconciler.backlog import BacklogGauges
from pacer_reconciler.metrics import ReconcilerMetrics

from .dispatching import until

LEFT, DONE = "pacer_reconciler_job_items_left_top", "pacer_reconciler_job_done_ratio_top"


def series(reg: CollectorRegistry, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    labels = labels or ("rank", "guid")
    return {tuple(s.labels[k] for k in labels): s.value for m in reg.collect() for s in m.samples
            if s.name == name}


def job(job_id: str, done: int, items: int, status: str = "running") -> dict[str, Any]:
    return {"job_id": job_id, "kind": "campaign", "tenant": "acme", "status": status, "done": done, "items": items}


class Reads:
    """What the leader reads, as the tables hold it now; ``failures`` are raised first."""

    def __init__(self, guids: list[dict[str, Any]], jobs: list[dict[str, Any]], held_back_s: float) -> None:
        self.guids, self.job_rows, self.held_back = guids, jobs, held_back_s
        self.asked: list[tuple[str, int]] = []
        self.failures: list[Exception] = []

    async def top(self, sort: str, limit: int) -> list[dict[str, Any]]:
        if self.failures:
            raise self.failures.pop()
        self.asked.append((sort, limit))
        return self.guids[:limit]

    async def jobs(self, limit: int) -> list[dict[str, Any]]:
        self.asked.append(("jobs", limit))
        return self.job_rows[:limit]

    async def held_back_s(self) -> float:
        return self.held_back


def test_the_top_n_replace_each_other_and_a_standby_exports_none() -> None:
    reads = Reads([{"guid": f"g{i}", "queued": 100 - i, "oldest_wait_s": 10.0 * i} for i in range(3)],
                  [job("j1", 25, 100), job("j2", 0, 0, "paused"), job("j3", 1, 2)], 42.5)
    reg = CollectorRegistry()
    m = ReconcilerMetrics(reg)
    gauges = BacklogGauges(reads, m, 2)
    asyncio.run(gauges.refresh())
    assert reads.asked == [("backlog", 2), ("wait", 2), ("jobs", 2)]
    assert series(reg, "pacer_reconciler_guid_backlog_top") == {("1", "g0"): 100, ("2", "g1"): 99}
    assert series(reg, "pacer_reconciler_guid_wait_top_seconds") == {("1", "g0"): 0.0, ("2", "g1"): 10.0}
    labels = ("rank", "job_id", "kind", "tenant", "status")
    assert series(reg, LEFT, *labels) == {("1", "j1", "campaign", "acme", "running"): 75,
                                          ("2", "j2", "campaign", "acme", "paused"): 0}
    assert series(reg, DONE, *labels) == {("1", "j1", "campaign", "acme", "running"): 0.25,
                                          ("2", "j2", "campaign", "acme", "paused"): 0.0}, "a job with no items yet"
    assert reg.get_sample_value("pacer_reconciler_events_held_back_seconds") == 42.5
    reads.guids, reads.job_rows = [{"guid": "g9", "queued": 7, "oldest_wait_s": 1.5}], [job("j3", 1, 2)]
    asyncio.run(gauges.refresh())
    assert series(reg, "pacer_reconciler_guid_backlog_top") == {("1", "g9"): 7}, "the old top is gone, not left behind"
    assert series(reg, LEFT, "rank", "job_id") == {("1", "j3"): 1}, "a job no longer in the top is gone"
    assert series(reg, DONE, "rank", "job_id") == {("1", "j3"): 0.5}

    def exported() -> bool:
        return bool(series(reg, "pacer_reconciler_guid_backlog_top") or series(reg, LEFT, "rank")
                    or series(reg, DONE, "rank") or reg.get_sample_value("pacer_reconciler_events_held_back_seconds"))

    async def standby() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(gauges.run(stop, lambda: False, 0.01))
        await until(lambda: not exported(), 5)
        stop.set()
        await task

    asyncio.run(standby())
    assert series(reg, "pacer_reconciler_guid_backlog_top") == {} and series(reg, "pacer_reconciler_guid_wait_top_seconds") == {}
    assert series(reg, LEFT, "rank") == {} and series(reg, DONE, "rank") == {}
    assert reg.get_sample_value("pacer_reconciler_events_held_back_seconds") == 0, "a standby holds nothing back"


def test_a_refresh_that_fails_with_any_error_is_tried_again_and_the_gauges_go_on() -> None:
    # Not only a database outage: a defect met once (a row it cannot read, a query the
    # schema refuses) must not end the task and leave the gauges frozen at their last values.
    reads = Reads([{"guid": "g1", "queued": 5, "oldest_wait_s": 2.0}], [], 3.0)
    reads.failures.append(KeyError("queued"))
    reg = CollectorRegistry()
    m = ReconcilerMetrics(reg)
    gauges = BacklogGauges(reads, m, 2)

    async def leading() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(gauges.run(stop, lambda: True, 0.01))
        await until(lambda: bool(series(reg, "pacer_reconciler_guid_backlog_top")) or task.done(), 5)
        stop.set()
        await task  # and it ended only when told to, raising nothing

    asyncio.run(leading())
    assert not reads.failures, "the failing refresh ran"
    assert series(reg, "pacer_reconciler_guid_backlog_top") == {("1", "g1"): 5}
    assert reg.get_sample_value("pacer_reconciler_events_held_back_seconds") == 3.0
