"""A service's event loop held by a blocking call: the stall is logged with what held it, and
once more when the loop runs again; the lag histogram shows it. A loop that only waits is
never reported."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import pytest

from pacer_common.loopwatch import LAG, LoopWatch
from tests.unit.dispatching import until as until_reached

# The messages' beginnings: a stall's message quotes the loop thread's stack, and with it the
# source lines of this file.
STALLED, RESUMED = "event loop stalled", "event loop ran again"


def _logged(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


def _lag_count_over(seconds: float) -> float:
    """Observations of the lag histogram above ``seconds``."""
    samples = {s.labels.get("le"): s.value for m in LAG.collect() for s in m.samples if s.name.endswith("_bucket")}
    return samples["+Inf"] - samples[str(seconds)]


def _held_by_a_synchronous_call() -> None:
    time.sleep(0.8)  # what a blocking driver call does to the loop


def _run(block: bool, until: Callable[[], bool] = lambda: True) -> LoopWatch:
    """Hold the loop with a synchronous call (``block``), or let it wait while the watch ticks
    16 times (0.8 s, well past the 0.3 s threshold); then run it until ``until()``."""
    async def scenario() -> LoopWatch:
        watch = LoopWatch(stall_s=0.3, interval_s=0.05)
        stop = asyncio.Event()
        task = asyncio.create_task(watch.run(stop))
        await until_reached(lambda: watch.ticks >= 2)  # the watch ticking
        if block:
            _held_by_a_synchronous_call()
        else:
            start = watch.ticks
            await until_reached(lambda: watch.ticks >= start + 16)
        await until_reached(until)  # the loop running again, and the watcher seeing it
        stop.set()
        await task
        return watch

    return asyncio.run(scenario())


def test_a_blocked_loop_is_logged_with_the_call_that_held_it(caplog: pytest.LogCaptureFixture) -> None:
    before = _lag_count_over(0.5)
    with caplog.at_level(logging.WARNING, logger="pacer_common.loopwatch"):
        watch = _run(block=True, until=lambda: bool(_logged(caplog, RESUMED)))
    assert watch.stalls == 1
    stalled = _logged(caplog, STALLED)
    assert len(stalled) == 1 and "_held_by_a_synchronous_call" in stalled[0], stalled
    resumed = _logged(caplog, RESUMED)
    assert len(resumed) == 1, [r.getMessage() for r in caplog.records]
    assert _lag_count_over(0.5) > before, "the lag histogram did not see the 0.8 s hold"


def test_a_loop_that_only_waits_is_never_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pacer_common.loopwatch"):
        watch = _run(block=False)
    assert watch.stalls == 0
    assert not [r for r in caplog.records if r.name == "pacer_common.loopwatch"]
