"""Backlog metrics stay bounded: the top-N guids, replaced on every refresh, none on a standby;
the events held back, from the leader alone."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from pacer_reconciler.backlog import BacklogGauges
from pacer_reconciler.metrics import ReconcilerMetrics

from .dispatching import until


def series(reg: CollectorRegistry, name: str) -> dict[tuple[str, str], float]:
    return {(s.labels["rank"], s.labels["guid"]): s.value for m in reg.collect() for s in m.samples
            if s.name == name}


def test_the_top_n_replace_each_other_and_a_standby_exports_none() -> None:
    tables: list[list[dict[str, Any]]] = [
        [{"guid": f"g{i}", "queued": 100 - i, "oldest_wait_s": 10.0 * i} for i in range(3)],
        [{"guid": "g9", "queued": 7, "oldest_wait_s": 1.5}],
    ]
    asked: list[tuple[str, int]] = []

    async def read(sort: str, limit: int) -> list[dict[str, Any]]:
        asked.append((sort, limit))
        return tables[0][:limit]

    held_back = [42.5]

    async def read_held_back() -> float:
        return held_back[0]

    reg = CollectorRegistry()
    m = ReconcilerMetrics(reg)
    gauges = BacklogGauges(read, m.backlog_top, m.wait_top, 2, read_held_back, m.events_held_back)
    asyncio.run(gauges.refresh())
    assert asked == [("backlog", 2), ("wait", 2)]
    assert series(reg, "pacer_reconciler_guid_backlog_top") == {("1", "g0"): 100, ("2", "g1"): 99}
    assert series(reg, "pacer_reconciler_guid_wait_top_seconds") == {("1", "g0"): 0.0, ("2", "g1"): 10.0}
    assert reg.get_sample_value("pacer_reconciler_events_held_back_seconds") == 42.5
    tables.pop(0)
    asyncio.run(gauges.refresh())
    assert series(reg, "pacer_reconciler_guid_backlog_top") == {("1", "g9"): 7}, "the old top is gone, not left behind"

    async def standby() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(gauges.run(stop, lambda: False, 0.01))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while ((series(reg, "pacer_reconciler_guid_backlog_top")
                or reg.get_sample_value("pacer_reconciler_events_held_back_seconds"))
               and loop.time() < deadline):
            await asyncio.sleep(0.01)
        stop.set()
        await task

    asyncio.run(standby())
    assert series(reg, "pacer_reconciler_guid_backlog_top") == {} and series(reg, "pacer_reconciler_guid_wait_top_seconds") == {}
    assert reg.get_sample_value("pacer_reconciler_events_held_back_seconds") == 0, "a standby holds nothing back"


def test_a_refresh_that_fails_with_any_error_is_tried_again_and_the_gauges_go_on() -> None:
    # Not only a database outage: a defect met once (a row it cannot read, a query the
    # schema refuses) must not end the task and leave the gauges frozen at their last values.
    failures = [KeyError("queued")]

    async def read(sort: str, limit: int) -> list[dict[str, Any]]:
        if failures:
            raise failures.pop()
        return [{"guid": "g1", "queued": 5, "oldest_wait_s": 2.0}]

    async def read_held_back() -> float:
        return 3.0

    reg = CollectorRegistry()
    m = ReconcilerMetrics(reg)
    gauges = BacklogGauges(read, m.backlog_top, m.wait_top, 2, read_held_back, m.events_held_back)

    async def leading() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(gauges.run(stop, lambda: True, 0.01))
        await until(lambda: bool(series(reg, "pacer_reconciler_guid_backlog_top")) or task.done(), 5)
        stop.set()
        await task  # and it ended only when told to, raising nothing

    asyncio.run(leading())
    assert not failures, "the failing refresh ran"
    assert series(reg, "pacer_reconciler_guid_backlog_top") == {("1", "g1"): 5}
    assert reg.get_sample_value("pacer_reconciler_events_held_back_seconds") == 3.0
