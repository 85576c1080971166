"""Python's cyclic garbage collector: a long-running service's thresholds, the time it takes,
and kept off a big batch of objects while it is built and used.

``tune()`` sets the thresholds (``PACER_<SERVICE>_GC_THRESHOLDS``) and counts the time every
collection takes, by generation (``pacer_gc_pause_seconds_total``, exported by
``metrics.service_registry``). With Python's default thresholds a sender holding 10,000 guids'
workers, windows and timers ran a full collection several times every 10 s, each visiting its
whole long-lived heap (0.3–0.6 s): 20–40% of its time (docs/performance.md).

The collector runs whenever enough new container objects have survived, and its passes
visit every object they cover: building the plan of a million-target request creates
millions of dicts and tuples, none of them garbage, and the passes they trigger cost about
as much again as building them (measured on 200,000 targets: 1.9 s of CPU with the
collector as it is, 1.2 s with it paused and what was built frozen).

``paused()`` turns the collector off for a stretch of synchronous work (never across an
``await``), then freezes what exists (``gc.freeze``: no pass visits those objects) and
turns it back on. The next ``paused()`` unfreezes them first, but freezes them again at its
end with no pass in between: reference counting frees every object that is not in a cycle,
while a cycle of garbage frozen once would stay frozen through every pause after it. So a
pause that begins :data:`FULL_EVERY_S` or more after the last full collection it made
collects once in full first, when the previous pause's big batch is normally gone: frozen
garbage lasts at most that long, for a full collection of the steady heap a minute.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

_paused_s = [0.0, 0.0, 0.0]  # seconds spent collecting, by generation, since tune()
_started: list[float] = []
FULL_EVERY_S = 60.0  # a pause collects in full first when the last time it did is this long ago
_last_full = [float("-inf")]  # time.monotonic() of that


def _timed(phase: str, info: Mapping[str, Any]) -> None:
    if phase == "start":
        _started[:] = [time.perf_counter()]
    elif _started:
        _paused_s[info["generation"]] += time.perf_counter() - _started.pop()


def tune(thresholds: tuple[int, int, int]) -> None:
    """Set the collector's thresholds and count the time its collections take (once per process)."""
    gc.set_threshold(*thresholds)
    if _timed not in gc.callbacks:
        gc.callbacks.append(_timed)


def pause_seconds() -> dict[int, float]:
    """Seconds spent collecting, by generation, since :func:`tune` (empty before it)."""
    return dict(enumerate(_paused_s)) if _timed in gc.callbacks else {}


@contextmanager
def paused() -> Iterator[None]:
    """The collector off inside; after, what exists frozen until the next pause, and the
    collector as it was (nesting is harmless)."""
    gc.unfreeze()  # what the last pause froze goes back to the oldest generation
    now = time.monotonic()
    if now - _last_full[0] >= FULL_EVERY_S:
        _last_full[0] = now
        gc.collect()  # the garbage in cycles that earlier pauses froze
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
