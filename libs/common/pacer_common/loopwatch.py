"""The event loop's own health: how late its timers run, and what held it when it stalled.

Every service does its work on one asyncio loop. A call that blocks it — a synchronous driver
call, a long computation, a stuck C extension — stops everything at once: no sends, no lease
renewals, no doorbells, and no log line to say so. ``LoopWatch`` measures, every
``interval_s``, how much later than asked the loop woke a sleeping task
(``pacer_event_loop_lag_seconds``). A thread beside the loop notices when the loop has not
ticked for ``stall_s``: it logs a warning with the stack the loop's thread is running at that
moment (what holds it), and, once the loop runs again, how long the stall lasted.

``watched()`` runs a service's main coroutine with the watch beside it (``main_for``); the
lag is exported by every service's registry (``LoopLag``, in ``metrics.service_registry``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
import traceback
from collections.abc import Coroutine, Iterable
from typing import Any

from prometheus_client import Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

log = logging.getLogger(__name__)

_STACK_FRAMES = 12  # the innermost frames of the loop's thread logged with a stall
INTERVAL_S = 0.25
# One per process, as its loop is; exported through each registry by ``LoopLag``.
LAG = Histogram("pacer_event_loop_lag_seconds", (
    f"How much later than asked the service's event loop woke a task sleeping {INTERVAL_S} s: a loop held "
    "by a blocking call shows here first (a stall of PACER_<SERVICE>_LOOP_STALL_S or more is also logged, "
    "with what held it)."), buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0), registry=None)


class LoopLag(Collector):
    """Exports ``LAG`` through a service's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def collect(self) -> Iterable[Metric]:
        return LAG.collect()


async def watched(main: Coroutine[Any, Any, None], stall_s: float) -> None:
    """Run ``main`` with a :class:`LoopWatch` beside it."""
    stop = asyncio.Event()
    watch = asyncio.create_task(LoopWatch(stall_s).run(stop), name="loopwatch")
    try:
        await main
    finally:
        stop.set()
        await watch


class LoopWatch:
    def __init__(self, stall_s: float = 2.0, interval_s: float = INTERVAL_S) -> None:
        self.stall_s = stall_s
        self.interval_s = interval_s
        self.stalls = 0  # stalls noticed (each logged once)
        self.ticks = 0  # times the loop woke the watch
        self._tick = 0.0  # when it last did (monotonic); set by run()
        self._loop_thread = 0  # the loop's thread; set by run()
        self._done = threading.Event()

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until ``stop``, with the watching thread beside the loop."""
        self._loop_thread = threading.get_ident()
        self._tick = time.monotonic()
        watcher = threading.Thread(target=self._watch, name="loopwatch", daemon=True)
        watcher.start()
        try:
            while not stop.is_set():
                asked = time.monotonic()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)
                if stop.is_set():
                    break
                now = time.monotonic()
                LAG.observe(max(0.0, now - asked - self.interval_s))
                self._tick = now
                self.ticks += 1
        finally:
            self._done.set()
            watcher.join(timeout=self.interval_s * 4)

    def _watch(self) -> None:
        stalled_since: float | None = None
        while not self._done.wait(self.interval_s):
            now, tick = time.monotonic(), self._tick
            if now - tick >= self.stall_s and stalled_since != tick:
                stalled_since = tick
                self.stalls += 1
                frame = sys._current_frames().get(self._loop_thread)
                stack = "".join(traceback.format_stack(frame)[-_STACK_FRAMES:]) if frame is not None else "(unknown)"
                log.warning("event loop stalled for %.1f s: nothing else runs until it returns; its thread is in:\n%s",
                            now - tick, stack)
            elif stalled_since is not None and tick != stalled_since:
                log.warning("event loop ran again after a stall of %.1f s", tick - stalled_since)
                stalled_since = None
