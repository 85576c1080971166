"""The fake gateway's actions beyond sendText ("Gateway contract, all actions" in DESIGN.md):
media upload and status, media sends, customer tags and detail, and device status.

Every customer-visible action (media sends, tag changes) and every customer read is recorded
through ``GatewayState.submit`` like a text send, so the duplicate and pacing witnesses
(``/_admin/stats``, ``/_admin/sends``) count them too: a record's ``content`` names the action
(``image:<mediaId>``, ``tags.add:<ids>``, ``customer.detail``) and its ``toId`` the target.

Admin (``/_admin/actions``): ``PUT`` knobs (``media_ready_after_ms``: how long an upload stays
``pending``, after which its ``media.ready`` callback is posted; ``media_fail_marker``: an
upload whose url contains it ends ``failed``), ``GET``
counters (uploads, sends refused because the media was not ready — a client that waits
correctly keeps that at 0). ``PUT /_admin/devices/{guid}`` ``{"status": ...}`` sets a device's
status: anything but ``online`` makes the guid's sends answer its code (1001 offline, 1002
kicked, 1003 unauthorized) through the ``fail_guids`` knob, and a ``device.status`` callback
is posted to the tenant's callback URL (``"tenant"`` in the body, default ``default``). ``PUT /_admin/customers/{id}``
seeds a customer; ``PUT /_admin/media/{mediaId}`` ``{"status": "ready"|"failed"}`` settles a
media now and posts its ``media.ready`` callback; ``DELETE /_admin/media/{mediaId}`` forgets it
(a gateway whose media expired): its status polls and sends answer ``bad_params``, and no
callback follows.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from pacer_dev.fakegateway.state import (
    CODE_BAD_PARAMS,
    CODE_KICKED,
    CODE_OFFLINE,
    CODE_UNAUTHORIZED,
    GatewayState,
    Outcome,
    message_for,
)

DEVICE_CODES = {"offline": CODE_OFFLINE, "kicked": CODE_KICKED, "unauthorized": CODE_UNAUTHORIZED}
MEDIA_KINDS = ("image", "file", "video")
SEND_PATHS = {"/message/sendImage": "image", "/message/sendFile": "file", "/message/sendVideo": "video"}


@dataclass
class Media:
    media_id: str
    guid: str
    url: str
    kind: str
    file_name: str | None
    uploaded_mono: float
    fails: bool
    forced: str | None = None  # set by an admin: ready or failed now

    def status(self, ready_after_s: float, now: float) -> str:
        if self.forced is not None:
            return self.forced
        if now - self.uploaded_mono < ready_after_s:
            return "pending"
        return "failed" if self.fails else "ready"


@dataclass
class Customer:
    customer_id: str
    name: str = ""
    remark: str = ""
    tags: set[str] = field(default_factory=set)
    version: int = 1

    def doc(self) -> dict[str, Any]:
        return {"customerId": self.customer_id, "name": self.name, "remark": self.remark,
                "tags": sorted(self.tags), "version": self.version}


@dataclass
class Actions:
    gw: GatewayState
    media_ready_after_ms: float = 0.0
    media_fail_marker: str = "fail-upload"
    media: dict[str, Media] = field(default_factory=dict)  # mediaId → media
    uploads_by_key: dict[str, str] = field(default_factory=dict)  # idempotency key → mediaId
    customers: dict[str, Customer] = field(default_factory=dict)
    devices: dict[str, str] = field(default_factory=dict)  # guid → status
    uploads: int = 0
    status_polls: int = 0
    sends_unready: int = 0
    # (tenant, cmd, guid, data) → the callback poster (tenants.Tenants.emit), set by the app
    on_event: list[Callable[[str, str, str, dict[str, Any]], None]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    # -- media --------------------------------------------------------------------------
    def upload(self, guid: str, url: str, kind: str, file_name: str | None, key: str | None,
               tenant: str = "default") -> dict[str, Any]:
        if key and key in self.uploads_by_key:  # the same upload again: the same media
            m = self.media[self.uploads_by_key[key]]
        else:
            self.uploads += 1
            m = Media(f"media-{next(self._ids)}", guid, url, kind, file_name, time.monotonic(),
                      self.media_fail_marker in url)
            self.media[m.media_id] = m
            if key:
                self.uploads_by_key[key] = m.media_id
            if self.media_ready_after_ms > 0:  # settles later: say so by callback when it does
                asyncio.get_running_loop().call_later(self.media_ready_after_ms / 1000, self._settled, m, tenant)
        status = self._status(m)
        return {"mediaId": m.media_id, "status": status} | ({"reason": "could not fetch the url"}
                                                            if status == "failed" else {})

    def status_of(self, guid: str, media_id: str) -> dict[str, Any] | None:
        self.status_polls += 1
        m = self.media.get(media_id)
        if m is None or m.guid != guid:
            return None
        status = self._status(m)
        return {"mediaId": media_id, "status": status} | ({"reason": "could not fetch the url"}
                                                          if status == "failed" else {})

    def forget(self, media_id: str) -> bool:
        m = self.media.pop(media_id, None)
        if m is None:
            return False
        m.forced = "forgotten"  # no media.ready callback for it any more
        self.uploads_by_key = {k: v for k, v in self.uploads_by_key.items() if v != media_id}
        return True

    def _settled(self, m: Media, tenant: str) -> None:
        if m.forced is not None:
            return  # an admin settled it already, with its own callback
        ok = not m.fails
        for listener in self.on_event:
            listener(tenant, "media.ready", m.guid,
                     {"mediaId": m.media_id, "ok": ok} | ({} if ok else {"reason": "could not fetch the url"}))

    def _status(self, m: Media) -> str:
        return m.status(self.media_ready_after_ms / 1000.0, time.monotonic())

    def send_media(self, kind: str, guid: str, to_id: str, media_id: str, key: str | None) -> Outcome:
        m = self.media.get(media_id)
        if m is None or m.guid != guid or m.kind != kind or self._status(m) != "ready":
            self.sends_unready += 1
            return Outcome(CODE_BAD_PARAMS, f"{message_for(CODE_BAD_PARAMS)}: media {media_id} is not ready")
        return self.gw.submit(guid, to_id, f"{kind}:{media_id}", key)

    # -- customers ----------------------------------------------------------------------
    def customer(self, customer_id: str) -> Customer:
        return self.customers.setdefault(customer_id, Customer(customer_id, name=f"customer {customer_id}"))

    def tags(self, op: str, guid: str, customer_id: str, tag_ids: list[str], key: str | None) -> Outcome:
        outcome = self.gw.submit(guid, customer_id, f"tags.{op}:{','.join(sorted(tag_ids))}", key)
        if outcome.code == 0:
            c = self.customer(customer_id)
            before = set(c.tags)
            c.tags = c.tags | set(tag_ids) if op == "add" else c.tags - set(tag_ids)
            if c.tags != before:
                c.version += 1
        return outcome

    # -- devices ------------------------------------------------------------------------
    def set_device(self, guid: str, status: str, tenant: str = "default") -> None:
        self.devices[guid] = status
        failing = dict(self.gw.config.fail_guids)
        if status == "online":
            failing.pop(guid, None)
        else:
            failing[guid] = DEVICE_CODES[status]
        self.gw.update_config({"fail_guids": failing})
        for listener in self.on_event:
            listener(tenant, "device.status", guid, {"status": status})

    def stats(self) -> dict[str, Any]:
        return {"uploads": self.uploads, "media": len(self.media), "status_polls": self.status_polls,
                "sends_unready": self.sends_unready, "devices": dict(self.devices),
                "media_ready_after_ms": self.media_ready_after_ms, "media_fail_marker": self.media_fail_marker}


def _str(body: dict[str, Any], name: str, required: bool = True) -> str | None:
    v = body.get(name)
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v:
        raise ValueError(f"{name} is required (a non-empty string)")
    return v


def _answer(outcome: Outcome, data: dict[str, Any] | None = None) -> JSONResponse:
    doc: dict[str, Any] = {"code": outcome.code, "msg": outcome.msg, "data": {}}
    if outcome.record is not None:
        doc["data"] = {"msgId": outcome.record.msg_id, **(data or {})}
    return JSONResponse(doc, status_code=outcome.http_status)


def action_routes(app: FastAPI, gw: GatewayState) -> Actions:
    """Register the actions' routes on ``app``; returns their state."""
    actions = Actions(gw)

    async def body_of(request: Request) -> dict[str, Any]:
        body = await request.json()
        if not isinstance(body, dict):
            raise ValueError("body must be a JSON object")
        return body

    def bad(reason: str) -> JSONResponse:
        return JSONResponse({"code": CODE_BAD_PARAMS, "msg": f"{message_for(CODE_BAD_PARAMS)}: {reason}"})

    def refused(guid: str) -> JSONResponse | None:
        code = gw.config.fail_guids.get(guid)
        return None if code is None else JSONResponse({"code": code, "msg": message_for(code)})

    @app.post("/media/upload")
    async def upload(request: Request) -> JSONResponse:
        try:
            b = await body_of(request)
            guid, url, kind = _str(b, "guid"), _str(b, "url"), _str(b, "kind")
            file_name = _str(b, "fileName", required=False)
        except ValueError as exc:
            return bad(str(exc))
        assert guid and url and kind
        if kind not in MEDIA_KINDS:
            return bad(f"kind must be one of {', '.join(MEDIA_KINDS)}")
        if (r := refused(guid)) is not None:
            return r
        data = actions.upload(guid, url, kind, file_name, request.headers.get("x-idempotency-key"),
                              str(request.scope.get("pacer_tenant", "default")))
        return JSONResponse({"code": 0, "msg": "ok", "data": data})

    @app.post("/media/status")
    async def media_status(request: Request) -> JSONResponse:
        try:
            b = await body_of(request)
            guid, media_id = _str(b, "guid"), _str(b, "mediaId")
        except ValueError as exc:
            return bad(str(exc))
        assert guid and media_id
        data = actions.status_of(guid, media_id)
        return bad(f"no media {media_id} for guid {guid}") if data is None else \
            JSONResponse({"code": 0, "msg": "ok", "data": data})

    async def send_media(request: Request) -> JSONResponse:
        try:
            b = await body_of(request)
            guid, to_id, media_id = _str(b, "guid"), _str(b, "toId"), _str(b, "mediaId")
        except ValueError as exc:
            return bad(str(exc))
        assert guid and to_id and media_id
        kind = SEND_PATHS[request.url.path]
        outcome = actions.send_media(kind, guid, to_id, media_id, request.headers.get("x-idempotency-key"))
        return _answer(outcome)

    for path in SEND_PATHS:
        app.add_api_route(path, send_media, methods=["POST"])

    async def tags(request: Request) -> JSONResponse:
        try:
            b = await body_of(request)
            guid, customer_id = _str(b, "guid"), _str(b, "customerId")
            tag_ids = b.get("tagIds")
            if not isinstance(tag_ids, list) or not tag_ids or not all(isinstance(t, str) and t for t in tag_ids):
                raise ValueError("tagIds is required (a non-empty list of strings)")
        except ValueError as exc:
            return bad(str(exc))
        assert guid and customer_id
        op = request.url.path.rsplit("/", 1)[-1]
        return _answer(actions.tags(op, guid, customer_id, tag_ids, request.headers.get("x-idempotency-key")))

    app.add_api_route("/customer/tags/add", tags, methods=["POST"])
    app.add_api_route("/customer/tags/remove", tags, methods=["POST"])

    @app.post("/customer/detail")
    async def detail(request: Request) -> JSONResponse:
        try:
            b = await body_of(request)
            guid, customer_id = _str(b, "guid"), _str(b, "customerId")
        except ValueError as exc:
            return bad(str(exc))
        assert guid and customer_id
        outcome = gw.submit(guid, customer_id, "customer.detail", request.headers.get("x-idempotency-key"))
        return _answer(outcome, {"customer": actions.customer(customer_id).doc()})

    @app.get("/_admin/actions")
    async def get_actions() -> dict[str, Any]:
        return actions.stats()

    @app.put("/_admin/actions")
    async def put_actions(request: Request) -> JSONResponse:
        b = await request.json()
        if not isinstance(b, dict) or set(b) - {"media_ready_after_ms", "media_fail_marker"}:
            return JSONResponse({"error": "knobs: media_ready_after_ms, media_fail_marker"}, status_code=400)
        if "media_ready_after_ms" in b:
            actions.media_ready_after_ms = float(b["media_ready_after_ms"])
        if "media_fail_marker" in b:
            actions.media_fail_marker = str(b["media_fail_marker"])
        return JSONResponse(actions.stats())

    @app.put("/_admin/media/{media_id}")
    async def put_media(media_id: str, request: Request) -> JSONResponse:
        b = await request.json()
        status = b.get("status") if isinstance(b, dict) else None
        m = actions.media.get(media_id)
        if m is None or status not in ("ready", "failed"):
            return JSONResponse({"error": "a known mediaId; status: ready or failed"}, status_code=400)
        m.forced = status
        for listener in actions.on_event:
            listener(str(b.get("tenant", "default")), "media.ready", m.guid,
                     {"mediaId": media_id, "ok": status == "ready"})
        return JSONResponse({"mediaId": media_id, "status": status})

    @app.delete("/_admin/media/{media_id}")
    async def forget_media(media_id: str) -> JSONResponse:
        if not actions.forget(media_id):
            return JSONResponse({"error": f"no media {media_id}"}, status_code=404)
        return JSONResponse({"mediaId": media_id, "forgotten": True})

    @app.put("/_admin/devices/{guid}")
    async def put_device(guid: str, request: Request) -> JSONResponse:
        b = await request.json()
        status = b.get("status") if isinstance(b, dict) else None
        if status != "online" and status not in DEVICE_CODES:
            return JSONResponse({"error": "status: online, offline, kicked or unauthorized"}, status_code=400)
        actions.set_device(guid, status, str(b.get("tenant", "default")))
        return JSONResponse({"guid": guid, "status": status})

    @app.put("/_admin/customers/{customer_id}")
    async def put_customer(customer_id: str, request: Request) -> JSONResponse:
        b = await request.json()
        if not isinstance(b, dict):
            return JSONResponse({"error": "body must be a JSON object"}, status_code=400)
        c = actions.customer(customer_id)
        c.name = str(b.get("name", c.name))
        c.remark = str(b.get("remark", c.remark))
        c.tags = set(b.get("tags", c.tags))
        c.version = int(b.get("version", c.version + 1))
        return JSONResponse(c.doc())

    return actions
