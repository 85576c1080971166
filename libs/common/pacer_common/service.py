"""What every service's ``main()`` shares: logs, ops endpoints, graceful stop."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

import uvloop
from prometheus_client import CollectorRegistry

from pacer_common import gcpause, loopwatch, tracing
from pacer_common.lifecycle import FATAL, stop_event
from pacer_common.logs import configure
from pacer_common.metrics import OffsetResets, service_registry
from pacer_common.ops import Health, ops_app, serve
from pacer_common.settings import OpsSettings

log = logging.getLogger(__name__)


@dataclass
class ServiceContext:
    name: str
    registry: CollectorRegistry
    health: Health
    stop: asyncio.Event


async def run_service(name: str, host: str, port: int,
                      body: Callable[[ServiceContext], Awaitable[None]], consumes: Iterable[str] = ()) -> None:
    """Serve /healthz, /readyz and /metrics on ``host:port`` and run ``body`` until it returns.

    ``body`` watches ``ctx.stop`` (SIGTERM/SIGINT) and returns after finishing its work in hand.
    Meanwhile the ops port keeps serving: ``/readyz`` answers 503 "stopping" from the stop on,
    ``/metrics`` shows the drain; it closes when ``body`` has returned.
    ``consumes`` names the Kafka topics the service reads, each counted by
    ``pacer_kafka_offset_resets_total`` from the start.
    """
    ctx = ServiceContext(name, service_registry(name), Health(), stop_event())
    resets = OffsetResets(ctx.registry, consumes)
    server, task = await serve(ops_app(name, ctx.registry, ctx.health), host, port)
    log.info("%s started; ops on http://%s:%d", name, host, port)
    draining = asyncio.create_task(_not_ready_once_stopped(ctx))
    try:
        await body(ctx)
    finally:
        ctx.health.stopping()
        draining.cancel()
        server.should_exit = True
        await task
        resets.close()
        log.info("%s stopped", name)


async def _not_ready_once_stopped(ctx: ServiceContext) -> None:
    await ctx.stop.wait()
    ctx.health.stopping()


def main_for(name: str, ops: OpsSettings, coro: Coroutine[Any, Any, None]) -> None:
    """Run a service's main coroutine; a process stopped by a fatal error exits non-zero."""
    configure(name, ops.log_level)
    gcpause.tune(ops.gc_thresholds)
    tracing.setup(name)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop if ops.event_loop == "uvloop" else None) as runner:
        runner.run(loopwatch.watched(coro, ops.loop_stall_s))
    if FATAL.reason is not None:
        sys.exit(f"{name} stopped by a fatal error: {FATAL.reason}")
