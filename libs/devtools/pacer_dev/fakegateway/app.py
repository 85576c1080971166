"""HTTP face of the fake gateway: a FastAPI app built by ``create_app``.

``POST /message/sendText`` is served by a bare ASGI handler ahead of FastAPI's
routing: it is the hot path (thousands of requests per second) and it needs the
server's raw ``send`` to drop a connection after accepting a send. Everything
else (lookup, admin, health, audiences for requery targets) is ordinary FastAPI routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from pacer_dev.fakegateway.actions import action_routes
from pacer_dev.fakegateway.audiences import Audience, AudienceError, Audiences
from pacer_dev.fakegateway.config import ConfigError, GatewayConfig
from pacer_dev.fakegateway.state import CODE_BAD_PARAMS, GatewayState, Outcome, message_for
from pacer_dev.fakegateway.tenants import Tenants, tenant_routes

SEND_PATH = "/message/sendText"
IDEMPOTENCY_HEADER = b"x-idempotency-key"
_JSON_HEADERS = b"application/json"


class FakeGatewayApp(FastAPI):
    """FastAPI app whose sendText endpoint bypasses routing and validation."""

    def __init__(self, gateway: GatewayState, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gateway = gateway
        self.audiences = Audiences()
        self.actions: Any = None  # set by create_app (pacer_dev.fakegateway.actions.Actions)
        self.tenants = Tenants(seed=gateway.config.seed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not await self.tenants.admit(scope, send):
            return
        if scope["type"] == "http" and scope["path"] == SEND_PATH and scope["method"] == "POST":
            await handle_send_text(self.gateway, scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def create_app(config: GatewayConfig | None = None) -> FakeGatewayApp:
    """Build a fake gateway app with fresh in-memory state."""
    gw = GatewayState(config or GatewayConfig())
    app = FakeGatewayApp(gw, title="Pacer fake WeCom gateway", docs_url="/_admin/docs")

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "sends": len(gw.records)}

    @app.post("/message/lookup")
    async def lookup(request: Request) -> JSONResponse:
        """By ``idempotencyKey``, or else by ``toId`` and ``content``, all in the JSON body."""
        if gw.config.lookup_delay_ms > 0:
            gw.lookups_delayed += 1
            await asyncio.sleep(gw.config.lookup_delay_ms / 1000.0)
        if gw.config.lookup_unavailable:
            return JSONResponse({"code": -1, "msg": "lookup unavailable"}, status_code=503)
        try:
            body = await request.json()
        except ValueError as exc:
            return _bad_params(f"body is not JSON: {exc}")
        if not isinstance(body, dict):
            return _bad_params("body must be a JSON object")
        guid = body.get("guid")
        if not isinstance(guid, str) or not guid:
            return _bad_params("guid is required")
        fields = [body.get(name) for name in ("idempotencyKey", "toId", "content")]
        try:
            if any(v is not None and not isinstance(v, str) for v in fields):
                raise ValueError("idempotencyKey, toId and content are strings")
            found = gw.lookup(guid, *fields)
        except ValueError as exc:
            return _bad_params(str(exc))
        sends = [{"msgId": r.msg_id, "at": r.at, "toId": r.to_id} for r in found]
        return JSONResponse({"code": 0, "msg": "ok", "data": {"found": bool(sends), "sends": sends}})

    @app.get("/_admin/config")
    async def get_config() -> dict[str, Any]:
        return gw.config.to_dict()

    @app.put("/_admin/config")
    async def put_config(request: Request) -> JSONResponse:
        try:
            changes = await request.json()
            if not isinstance(changes, dict):
                raise ConfigError("body must be a JSON object of knobs")
            cfg = gw.update_config(changes)
        except (ConfigError, json.JSONDecodeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(cfg.to_dict())

    @app.get("/_admin/stats")
    async def stats(detail: int = 0) -> dict[str, Any]:
        return gw.stats(detail=bool(detail))

    @app.get("/_admin/sends")
    async def sends(guid: str | None = None, limit: int = 1000, offset: int = 0) -> dict[str, Any]:
        limit = max(0, min(limit, 100_000))
        offset = max(0, offset)
        page = gw.sends(guid, limit, offset)
        return {"total": gw.count_sends(guid), "sends": [r.to_dict() for r in page]}

    @app.post("/_admin/reset")
    async def reset() -> dict[str, Any]:
        gw.reset()
        return {"status": "reset"}

    _audience_routes(app)
    app.actions = action_routes(app, gw)  # media, customers, devices (actions.py)
    tenant_routes(app, app.tenants)
    app.actions.on_event.append(app.tenants.emit)  # device.status and media.ready callbacks
    return app


def _audience_routes(app: FakeGatewayApp) -> None:
    """Target sets for requery jobs: define them under /_admin/audiences, page them from /_audience."""
    auds = app.audiences
    gates: dict[str, asyncio.Event] = {}  # per audience: set by a release, then replaced

    async def body(request: Request) -> Any:
        try:
            return await request.json()
        except json.JSONDecodeError as exc:
            raise AudienceError(f"body is not JSON: {exc}") from None

    @app.put("/_admin/audiences/{name}")
    async def put_audience(name: str, request: Request) -> JSONResponse:
        try:
            return JSONResponse(auds.put(name, await body(request)).view())
        except AudienceError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    async def changed(name: str, request: Request, change: Callable[[str, Any], Audience]) -> JSONResponse:
        """An existing audience's knobs changed: 404 for an unknown one, 400 for a bad body."""
        try:
            return JSONResponse(change(name, await body(request)).view())
        except AudienceError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404 if name not in auds.by_name else 400)

    @app.put("/_admin/audiences/{name}/faults")
    async def put_faults(name: str, request: Request) -> JSONResponse:
        return await changed(name, request, auds.fault)

    @app.put("/_admin/audiences/{name}/hold")
    async def put_hold(name: str, request: Request) -> JSONResponse:
        return await changed(name, request, auds.hold)

    @app.post("/_admin/audiences/{name}/release")
    async def release(name: str) -> JSONResponse:
        gate = gates.pop(name, None)
        if gate is not None:
            gate.set()
        try:
            return JSONResponse(auds.get(name).view())
        except AudienceError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)

    @app.get("/_admin/audiences/{name}")
    async def get_audience(name: str) -> JSONResponse:
        try:
            return JSONResponse(auds.get(name).view())
        except AudienceError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)

    @app.delete("/_admin/audiences/{name}")
    async def delete_audience(name: str) -> JSONResponse:
        return JSONResponse({"deleted": auds.delete(name)})

    @app.get("/_audience/{name}")
    async def audience_page(name: str, request: Request) -> Response:
        q = request.query_params
        try:
            limit = int(q["limit"]) if "limit" in q else None
        except ValueError:
            return JSONResponse({"error": "limit must be an integer"}, status_code=400)
        if auds.take_hold(name):
            try:
                await gates.setdefault(name, asyncio.Event()).wait()
            finally:
                auds.unhold(name)
        answer = auds.page(name, q.get("cursor"), limit, request.headers.get("traceparent"))
        return Response(answer.body, status_code=answer.status, media_type="application/json")


def _bad_params(reason: str) -> JSONResponse:
    return JSONResponse({"code": CODE_BAD_PARAMS, "msg": f"{message_for(CODE_BAD_PARAMS)}: {reason}"})


async def handle_send_text(gw: GatewayState, scope: Scope, receive: Receive, send: Send) -> None:
    """Serve one sendText request: validate, delay, decide, then answer or drop."""
    body = await _read_body(receive)
    if body is None:
        return
    parsed = _parse_send(body)
    if parsed is None:
        await _answer(send, gw.reject_malformed())
        return
    guid, to_id, content = parsed
    key = None
    for name, value in scope["headers"]:
        if name == IDEMPOTENCY_HEADER:
            key = value.decode("utf-8", "replace") or None
            break
    gw.enter(guid)
    try:
        delay = gw.latency_s()
        if delay > 0:
            await asyncio.sleep(delay)
        outcome = gw.submit(guid, to_id, content, key)
        if outcome.drop and gw.config.drop_hang_ms > 0:
            await asyncio.sleep(gw.config.drop_hang_ms / 1000.0)
    finally:
        gw.leave(guid)
    if outcome.drop:
        await _drop_connection(receive, send)
    else:
        await _answer(send, outcome)


async def _read_body(receive: Receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _parse_send(body: bytes) -> tuple[str, str, str] | None:
    try:
        payload = json.loads(body)
        guid, to_id, content = payload["guid"], payload["toId"], payload["content"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (isinstance(guid, str) and isinstance(to_id, str) and isinstance(content, str)):
        return None
    if not (guid and to_id and content):
        return None
    return guid, to_id, content


async def _answer(send: Send, outcome: Outcome) -> None:
    doc: dict[str, Any] = {"code": outcome.code, "msg": outcome.msg}
    record = outcome.record
    doc["data"] = {"msgId": record.msg_id, "guid": record.guid, "toId": record.to_id} if record else {}
    extra = [] if outcome.retry_after_s is None else [(b"retry-after", str(outcome.retry_after_s).encode())]
    await _send_json(send, outcome.http_status, doc, extra)


async def _send_json(send: Send, status: int, doc: dict[str, Any],
                     extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    headers = [(b"content-type", _JSON_HEADERS), (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _drop_connection(receive: Receive, send: Send) -> None:
    """Close the connection without a response, so the caller cannot know the outcome.

    Under uvicorn the raw ``send`` is a bound method of the request cycle, which
    holds the socket transport; closing it yields a clean "server disconnected
    without a response". Elsewhere, fall back to starting a response and never
    finishing it, which makes the server abort the connection.
    """
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is not None and callable(getattr(transport, "close", None)):
        transport.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_until_disconnect(receive), timeout=2.0)
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"1024")]}
    )


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
