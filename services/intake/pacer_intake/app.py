"""The intake's HTTP surface: ``POST /callbacks/{tenant}``, and /healthz, /readyz, /metrics.

The callback route is a bare ASGI handler ahead of FastAPI's routing (as the fake gateway's
sendText): it is the hot path, and FastAPI's request machinery costs more CPU than the
intake's own work. The ops routes are ordinary FastAPI routes.
"""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from starlette.types import Receive, Scope, Send

from pacer_common.ops import Health, add_ops_routes
from pacer_intake.core import Intake, Received
from pacer_intake.metrics import UNKNOWN, IntakeMetrics

PREFIX = "/callbacks/"
_SIGNATURE = b"x-signature"
_LENGTH = b"content-length"
_JSON = [(b"content-type", b"application/json")]


class IntakeApp(FastAPI):
    def __init__(self, intake: Intake, metrics: IntakeMetrics, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.intake, self.metrics = intake, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path.startswith(PREFIX) and "/" not in path[len(PREFIX):]:
            if scope["method"] != "POST":
                await _answer(send, 405, {"code": 405, "msg": "POST only"})
                return
            await self.callback(path[len(PREFIX):], scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def callback(self, tenant: str, scope: Scope, receive: Receive, send: Send) -> None:
        signature, declared = None, None
        for name, value in scope["headers"]:
            if name == _SIGNATURE:
                signature = value.decode("latin-1")
            elif name == _LENGTH:
                declared = value
        try:
            raw = await _body(receive, self.intake.max_body_bytes, declared)
        except _Gone:
            return  # the client left before sending its body: nothing to answer
        started = time.perf_counter()
        got = await self.intake.receive(tenant, raw, signature)
        m = self.metrics
        m.seconds.labels(got.result).observe(time.perf_counter() - started)
        m.callbacks.labels(tenant if self.intake.known(tenant) else UNKNOWN, got.result).inc()
        await _answer(send, got.status, _doc(got))


class _Gone(Exception):
    pass


def _doc(got: Received) -> dict[str, Any]:
    # The gateway's own answer shape: code 0 is accepted.
    return {"code": 0 if got.result == "accepted" else got.status, "msg": got.message}


async def _body(receive: Receive, limit: int, declared: bytes | None) -> bytes | None:
    """The raw body, or None (left unread) once it is over ``limit`` bytes."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Gone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _answer(send: Send, status: int, doc: dict[str, Any]) -> None:
    body = json.dumps(doc, separators=(",", ":")).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [*_JSON, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def build_app(intake: Intake, registry: CollectorRegistry, health: Health) -> FastAPI:
    app = IntakeApp(intake, IntakeMetrics(registry), title="Pacer callback intake", docs_url=None, redoc_url=None,
                    openapi_url=None)
    add_ops_routes(app, "intake", registry, health, include_in_schema=False)
    return app
