"""Health, readiness and Prometheus metrics for a service, served beside its main loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

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

    def set_ready(self, ready: bool, reason: str = "") -> None:
        self._ready, self._reason = ready, reason

    @property
    def alive(self) -> bool:
        return self.fatal.reason is None

    @property
    def ready(self) -> bool:
        return self._ready and self.alive

    @property
    def reason(self) -> str:
        return self._reason if self.fatal.reason is None else f"fatal: {self.fatal.reason}"


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


async def serve(app: FastAPI, host: str, port: int) -> tuple[uvicorn.Server, asyncio.Task[None]]:
    """Start uvicorn on the running loop; the caller sets ``server.should_exit`` to stop it."""
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off", log_config=None)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    return server, task
