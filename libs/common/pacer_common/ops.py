"""Health, readiness and Prometheus metrics for a service, served beside its main loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

import uvicorn
from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from pacer_common.lifecycle import FATAL, Fatal


class Health:
    """Liveness is "the loop is turning", until ``fatal`` is declared; readiness is set by
    the service once wired, and is lost for good with a fatal error."""

    def __init__(self, fatal: Fatal = FATAL) -> None:
        self.fatal = fatal
        self._ready = False
        self._reason = "starting"
        self._stopping = False

    def set_ready(self, ready: bool, reason: str = "") -> None:
        self._ready, self._reason = ready, reason

    def stopping(self) -> None:
        """The service drains (SIGTERM or a fatal error): not ready from now on, whatever the
        service sets later (a round in hand may still report its state)."""
        self._stopping = True

    @property
    def alive(self) -> bool:
        return self.fatal.reason is None

    @property
    def ready(self) -> bool:
        return self._ready and self.alive and not self._stopping

    @property
    def reason(self) -> str:
        if self.fatal.reason is not None:
            return f"fatal: {self.fatal.reason}"
        return "stopping" if self._stopping else self._reason


def ops_app(service: str, registry: CollectorRegistry, health: Health,
            extra: Callable[[FastAPI], None] | None = None) -> FastAPI:
    app = FastAPI(title=f"pacer-{service} ops", docs_url=None, redoc_url=None)
    add_ops_routes(app, service, registry, health)
    if extra is not None:
        extra(app)
    return app


def add_ops_routes(app: FastAPI, service: str, registry: CollectorRegistry, health: Health,
                   include_in_schema: bool = True) -> None:
    """/healthz, /readyz and /metrics on ``app`` (a service whose main app is HTTP adds them there)."""

    @app.get("/healthz", include_in_schema=include_in_schema)
    async def healthz(response: Response) -> dict[str, str]:
        if not health.alive:  # the orchestrator restarts it, even if its stop hangs
            response.status_code = 503
            return {"status": "fatal", "service": service, "reason": health.reason}
        return {"status": "ok", "service": service}

    @app.get("/readyz", include_in_schema=include_in_schema)
    async def readyz(response: Response) -> dict[str, str | bool]:
        if not health.ready:
            response.status_code = 503
        return {"ready": health.ready, "reason": health.reason}

    @app.get("/metrics", include_in_schema=include_in_schema)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


class _Server(uvicorn.Server):
    """uvicorn without its own SIGTERM/SIGINT handlers. ``Server.serve()`` installs them for
    as long as it serves (``capture_signals``) and stops at the first signal: the ops port
    of a draining service went dark at once, so ``/readyz`` never answered "stopping" and
    nothing counted during the drain was scraped. The service's stop event
    (:func:`pacer_common.lifecycle.stop_event`) hears the signals instead, and its owner
    stops the server once its own shutdown is done."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(app: FastAPI, host: str, port: int) -> tuple[uvicorn.Server, asyncio.Task[None]]:
    """Start uvicorn on the running loop; it serves through SIGTERM until the caller sets
    ``server.should_exit``."""
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off", log_config=None)
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    return server, task
