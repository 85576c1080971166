"""The intake's HTTP surface: ``POST /callbacks/{tenant}``, and /healthz, /readyz, /metrics."""

from __future__ import annotations

import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry

from pacer_common.ops import Health, add_ops_routes
from pacer_intake.core import Intake
from pacer_intake.metrics import UNKNOWN, IntakeMetrics


async def _body(request: Request, limit: int) -> bytes | None:
    """The raw body, or None (left unread) once it is over ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(intake: Intake, registry: CollectorRegistry, health: Health) -> FastAPI:
    m = IntakeMetrics(registry)
    app = FastAPI(title="Pacer callback intake", docs_url=None, redoc_url=None, openapi_url=None)
    add_ops_routes(app, "intake", registry, health, include_in_schema=False)

    @app.post("/callbacks/{tenant}")
    async def callback(tenant: str, request: Request) -> JSONResponse:
        raw = await _body(request, intake.max_body_bytes)
        started = time.perf_counter()
        got = await intake.receive(tenant, raw, request.headers.get("x-signature"))
        m.seconds.labels(got.result).observe(time.perf_counter() - started)
        m.callbacks.labels(tenant if intake.known(tenant) else UNKNOWN, got.result).inc()
        # The gateway's own answer shape: code 0 is accepted.
        return JSONResponse({"code": 0 if got.result == "accepted" else got.status, "msg": got.message},
                            status_code=got.status)

    return app
