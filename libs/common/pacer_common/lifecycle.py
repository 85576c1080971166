"""Graceful shutdown: SIGTERM/SIGINT, or an error the process cannot get over (:class:`Fatal`),
set an event the service loop watches; steps repeated until it is set."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Fatal:
    """An error after which this process can do nothing useful, however long it retries (a
    Kafka producer's fatal error: every later produce fails). Once declared, the service is
    unhealthy and not ready (``Health``: ``/healthz`` and ``/readyz`` answer 503 with the
    reason), its stop event is set as by SIGTERM, and ``main_for`` exits non-zero: the
    orchestrator starts a fresh process. One per process (:data:`FATAL`), like the signals
    it stands beside; declared from any thread (librdkafka calls back on whichever thread
    polls the client)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._stops: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def stops(self, stop: asyncio.Event) -> None:
        """Set ``stop`` (an event of the running loop) once this is declared; at once if it was."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._stops = [(lp, ev) for lp, ev in self._stops if not lp.is_closed()] + [(loop, stop)]
            declared = self.reason is not None
        if declared:
            stop.set()

    def declare(self, reason: str) -> None:
        """The process is beyond repair (the first reason is kept): stop every service loop."""
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            stops = list(self._stops)
        log.critical("fatal: %s; stopping, to be started afresh", reason)
        for loop, stop in stops:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nothing left to stop
                loop.call_soon_threadsafe(stop.set)


FATAL = Fatal()


def stop_event(fatal: Fatal = FATAL) -> asyncio.Event:
    """An event set on SIGTERM or SIGINT, or when ``fatal`` is declared; the service finishes
    the item in hand and exits. A second signal while it stops is a kill: the process exits at
    once (128 + the signal's number), as a second Ctrl-C does elsewhere; what it had in hand is
    left as a kill -9 leaves it, which every step survives (an item in flight is verified)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_signal, stop, sig)
    fatal.stops(stop)
    return stop


def _on_signal(stop: asyncio.Event, sig: signal.Signals) -> None:
    if stop.is_set():
        log.warning("%s while stopping: exiting at once", sig.name)
        logging.shutdown()
        os._exit(128 + sig.value)
    stop.set()


async def attempt(step: Callable[[], Awaitable[object]], what: str,
                  on_error: Callable[[], None] | None = None) -> bool:
    """One round of a background loop: ``step``, whose failure — any exception but a
    cancellation, the database's or a bug's — is logged with its error (``what`` failed),
    counted (``on_error``: a metric's hook) and swallowed, so that the loop goes on; whether
    the round succeeded. A loop left to end on an exception would end silently (its task is
    awaited only at shutdown), and its work with it."""
    try:
        await step()
    except Exception:
        log.exception("%s failed; trying again", what)
        if on_error is not None:
            on_error()
        return False
    return True


async def every(step: Callable[[], Awaitable[object]], stop: asyncio.Event, every_s: float, what: str,
                on_error: Callable[[], None] | None = None, backoff_max_s: float | None = None) -> None:
    """Run ``step`` now, every ``every_s`` until ``stop``, and once more after it. A round that
    fails is logged and counted (:func:`attempt`) and tried again at the next: what it had to
    do is kept. With ``backoff_max_s``, rounds failing in a row back off, each wait twice the
    last, up to that: a round that keeps failing fills neither the log nor the database."""
    failed = 0
    while True:
        stopped = stop.is_set()
        failed = 0 if await attempt(step, what, on_error) else failed + 1
        if stopped:
            return
        wait = every_s if backoff_max_s is None else min(every_s * 2 ** min(failed, 30), max(every_s, backoff_max_s))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)
