"""Graceful shutdown: SIGTERM/SIGINT set an event the service loop watches; steps repeated
until it is set."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


def stop_event() -> asyncio.Event:
    """An event set on SIGTERM or SIGINT; the service finishes the item in hand and exits."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def every(step: Callable[[], Awaitable[None]], stop: asyncio.Event, every_s: float, what: str) -> None:
    """Run ``step`` now, every ``every_s`` until ``stop``, and once more after it. A round that
    fails is logged (``what``) and tried again at the next: what it had to do is kept."""
    while True:
        stopped = stop.is_set()
        try:
            await step()
        except Exception:
            log.warning("%s failed; trying again", what, exc_info=True)
        if stopped:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
