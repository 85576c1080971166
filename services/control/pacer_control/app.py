"""Wiring: a Postgres pool (and the DLQ topics) in, the Control API (and the operator console) out.

Tests build the app here with a pool of their own (or ``control_pool``'s); ``main`` builds both
from settings. Besides
the API under /api/v1 the app serves /healthz, /readyz and /metrics (not in the OpenAPI
document, no token needed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from asgi_correlation_id import CorrelationIdMiddleware
from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry

from pacer_common.db.pool import Pool, new_pool
from pacer_common.ops import Health, add_ops_routes
from pacer_control.adapters.postgres import PostgresControl
from pacer_control.api import PREFIX, create_api
from pacer_control.api.admin import DRY_RUN_MAX_BYTES, DRY_RUN_TOO_LARGE, DRY_RUN_WAIT_S, DryRuns
from pacer_control.api.body_limit import BodyLimit
from pacer_control.core import COUNTS_FRESH_S, COUNTS_SHARE, Control
from pacer_control.domain import report, views
from pacer_control.metrics import ControlMetrics
from pacer_control.ports import DeadLetterQueue
from pacer_control.settings import ControlSettings

access = logging.getLogger("pacer.control.access")
_OPS_ROUTES = frozenset({"/metrics", "/healthz", "/readyz"})
# The methods the request metrics name; any other token a caller sends (h11 takes any) is
# "other", or anyone could add series at will, without a token.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def control_pool(url: str, cfg: ControlSettings) -> Pool:
    """The control service's pool, not opened yet. A request waits at most
    ``PACER_CONTROL_DB_DEADLINE_S`` for a connection while all are in use, then is answered
    503 (as when the database is away), not psycopg's 30 s. A statement running past
    ``PACER_CONTROL_STATEMENT_TIMEOUT_S`` is stopped by the server and answered 503: a heavy
    read goes on no longer, whether or not its client is still there (an operator's action
    runs to its end: ``PostgresControl.atomically``). Times are read and written in UTC, as
    the console shows them and Kafka's dead letters carry them, whatever the server's zone."""
    options = "-c TimeZone=UTC"
    if cfg.statement_timeout_s:
        options += f" -c statement_timeout={max(1, round(cfg.statement_timeout_s * 1000))}"
    return new_pool(url, min_size=1, max_size=cfg.db_pool_max, name="pacer-control", options=options,
                    timeout=cfg.db_deadline_s)


def build_app(pool: Pool, *, sandbox_targets: Iterable[str] = (),
              registry: CollectorRegistry | None = None, health: Health | None = None,
              db_deadline_s: float = 5.0, stalled_after_s: float = views.STALLED_AFTER_S,
              dead_letters: DeadLetterQueue | None = None, max_body_bytes: int = 1_048_576,
              report_page_rows: int = report.PAGE_ROWS, dry_run_max_bytes: int = DRY_RUN_MAX_BYTES,
              dry_run_concurrency: int = 1, dry_run_wait_s: float = DRY_RUN_WAIT_S,
              counts_share: float = COUNTS_SHARE, counts_fresh_s: float = COUNTS_FRESH_S,
              clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> FastAPI:
    """The Control API over ``pool`` (and the DLQ topics over ``dead_letters``; without it
    the dead-letter routes answer 503). If the pool is not open yet, the app's lifespan opens
    it (on the loop that serves the app) and closes it again at shutdown. ``dry_run_wait_s``,
    how long a dry run waits for its turn, and ``clock``, the use cases' time, are there for
    tests and benchmarks."""
    registry = registry or CollectorRegistry()
    health = health or Health()
    control = Control(PostgresControl(pool, db_deadline_s), frozenset(sandbox_targets), stalled_after_s=stalled_after_s,
                      dead_letters=dead_letters, report_page_rows=report_page_rows, counts_share=counts_share,
                      counts_fresh_s=counts_fresh_s, clock=clock)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        opened = pool.closed
        if opened:
            await pool.open(wait=True, timeout=30)
        health.set_ready(True, "serving")
        try:
            yield
        finally:
            health.set_ready(False, "stopping")
            if opened:
                await pool.close()

    app = create_api(control, lifespan)
    app.state.dry_runs = DryRuns(dry_run_max_bytes, dry_run_concurrency, dry_run_wait_s)
    add_ops_routes(app, "control", registry, health, include_in_schema=False)
    # Inside the request count (a 413 is counted and logged); before any route reads a body.
    app.add_middleware(BodyLimit, limit=max_body_bytes,
                       paths={f"{PREFIX}/dry-run": (dry_run_max_bytes, DRY_RUN_TOO_LARGE)})
    _count_requests(app, registry)
    # Outermost: every request (and its log lines) carries an X-Request-ID, given or drawn.
    app.add_middleware(CorrelationIdMiddleware, header_name="X-Request-ID")
    return app


def _count_requests(app: FastAPI, registry: CollectorRegistry) -> None:
    m = ControlMetrics(registry)

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        status = "500"  # an unhandled exception: Starlette answers 500 outside this middleware
        try:
            response = await call_next(request)
            status = str(response.status_code)
            return response
        finally:
            route = getattr(request.scope.get("route"), "path", "unmatched")
            elapsed = time.perf_counter() - started
            method = request.method if request.method in _METHODS else "other"
            m.requests.labels(method, route, status).inc()
            m.seconds.labels(method, route).observe(elapsed)
            if route not in _OPS_ROUTES or status >= "400":  # scrapes and probes: counted, not logged
                access.info("%s %s %s %.1fms", request.method, request.url.path, status, elapsed * 1000,
                            extra={"method": request.method, "route": route, "status": int(status),
                                   "duration_ms": round(elapsed * 1000, 1)})
