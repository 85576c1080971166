"""Graceful shutdown: SIGTERM/SIGINT set an event the service loop watches."""

from __future__ import annotations

import asyncio
import signal


def stop_event() -> asyncio.Event:
    """An event set on SIGTERM or SIGINT; the service finishes the item in hand and exits."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
