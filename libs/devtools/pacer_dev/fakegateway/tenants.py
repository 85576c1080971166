"""Tenants of the fake gateway: bearer credentials per tenant, a tenant's gateway failing
entirely, and callbacks posted to each tenant's callback URL, signed, with faults.

Configured at run time under ``/_admin``:

- ``PUT /_admin/tenants/{name}`` ``{"credential", "callback_secret", "callback_url", "fail"}``
  (each optional; ``fail: true`` answers every call of that tenant HTTP 503), ``GET /_admin/tenants``.
  Once any tenant has a credential, every gateway call must carry ``Authorization: Bearer
  <credential>`` of a known tenant (else HTTP 401); with none, calls are not checked (as before).
- ``PUT /_admin/callbacks`` — the callback faults, each optional: ``p_duplicate`` (posted twice),
  ``p_lost`` (never posted), ``p_reorder`` (held back and posted after the tenant's next one, or
  after ``reorder_hold_ms``), ``late_ms`` and ``late_jitter_ms`` (posted that much later), and
  ``lose_next``, ``duplicate_next``, ``reorder_next``, each ``{"<cmd>": n}`` (the next ``n``
  callbacks of that command are lost, posted twice, held back, whatever the dice say: a fault
  a short test can count on); ``GET /_admin/callbacks`` answers them with counts.
- ``POST /_admin/callbacks/emit`` ``{"tenant", "cmd", "guid", "data", "count"}`` — emit
  callbacks as the gateway would (``count`` of them, each with its own ``msgUid`` for
  ``message.received`` unless ``data`` names one). Other parts of the gateway call
  :meth:`Tenants.emit`; the caller's tenant is ``scope["pacer_tenant"]``.

A callback body is ``{"cmd", "guid", "ts", "data"}`` (DESIGN.md "Callbacks"), signed with the
tenant's callback secret: hex HMAC-SHA256 of the raw body in ``X-Signature``. A post answered
with 5xx or not at all is tried again (at most 5 times, backing off); 4xx is not.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import Scope, Send

from pacer_common.domain.tenants import sign

# Paths that are the gateway's own administration, not calls a tenant makes.
_OPEN_PREFIXES = ("/_admin", "/healthz", "/_audience")
POST_ATTEMPTS = 5
FORCED = ("lose_next", "duplicate_next", "reorder_next")  # faults owed to the next callbacks of a command


@dataclass(frozen=True)
class Tenant:
    name: str
    credential: str | None = None
    callback_secret: str | None = None
    callback_url: str | None = None
    fail: bool = False

    def view(self) -> dict[str, Any]:
        return {"name": self.name, "has_credential": self.credential is not None,
                "has_callback_secret": self.callback_secret is not None, "callback_url": self.callback_url,
                "fail": self.fail}


@dataclass(frozen=True)
class CallbackFaults:
    p_duplicate: float = 0.0
    p_lost: float = 0.0
    p_reorder: float = 0.0
    late_ms: float = 0.0
    late_jitter_ms: float = 0.0
    reorder_hold_ms: float = 1000.0

    def updated(self, changes: dict[str, Any]) -> CallbackFaults:
        unknown = set(changes) - set(asdict(self))
        if unknown:
            raise ValueError(f"unknown callback fault(s): {', '.join(sorted(unknown))}")
        new = replace(self, **{k: float(v) for k, v in changes.items()})
        for k, v in asdict(new).items():
            if v < 0 or (k.startswith("p_") and v > 1):
                raise ValueError(f"{k} must be {'between 0 and 1' if k.startswith('p_') else '>= 0'}, got {v}")
        return new


@dataclass
class _Held:
    body: bytes
    timer: asyncio.TimerHandle


@dataclass
class Tenants:
    by_name: dict[str, Tenant] = field(default_factory=dict)
    faults: CallbackFaults = field(default_factory=CallbackFaults)
    counts: Counter[str] = field(default_factory=Counter)
    seed: int | None = None
    # fault (one of FORCED) → cmd → callbacks of it still owed that fault
    forced: dict[str, Counter[str]] = field(default_factory=lambda: {name: Counter() for name in FORCED})
    _held: dict[str, _Held] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _uids: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.client: httpx.AsyncClient | None = None

    # -- credentials ---------------------------------------------------------------------
    def of_credential(self, authorization: str | None) -> Tenant | None:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        return next((t for t in self.by_name.values() if t.credential and hmac.compare_digest(t.credential, token)),
                    None)

    async def admit(self, scope: Scope, send: Send) -> bool:
        """Whether a call may go on; if not, its answer has been sent (401, or 503 for a failing tenant)."""
        if scope["type"] != "http" or scope["path"].startswith(_OPEN_PREFIXES):
            return True
        if not any(t.credential for t in self.by_name.values()):
            return True
        headers = dict(scope["headers"])
        tenant = self.of_credential(headers.get(b"authorization", b"").decode("latin-1"))
        if tenant is None:
            self.counts["unauthorized"] += 1
            await _answer(send, 401, {"code": 401, "msg": "missing or unknown bearer credential"})
            return False
        if tenant.fail:
            self.counts[f"failed:{tenant.name}"] += 1
            await _answer(send, 503, {"code": -1, "msg": f"tenant {tenant.name}: gateway unavailable"})
            return False
        scope["pacer_tenant"] = tenant.name
        return True

    # -- callbacks -----------------------------------------------------------------------
    def emit(self, tenant: str, cmd: str, guid: str, data: dict[str, Any]) -> None:
        """Post one callback of ``tenant`` to its callback URL (in the background), with the faults."""
        t = self.by_name.get(tenant)
        if t is None or not t.callback_url or not t.callback_secret:
            self.counts["unroutable"] += 1
            return
        self.counts["emitted"] += 1
        body = json.dumps({"cmd": cmd, "guid": guid, "ts": int(time.time() * 1000), "data": data},
                          separators=(",", ":"), ensure_ascii=False).encode()
        f = self.faults
        if self._forced("lose_next", cmd) or self.rng.random() < f.p_lost:
            self.counts["lost"] += 1
            self.counts[f"lost:{cmd}"] += 1
            return
        copies = 2 if self._forced("duplicate_next", cmd) or self.rng.random() < f.p_duplicate else 1
        self.counts["duplicated"] += copies - 1
        held = self._held.pop(tenant, None)
        if held is None and (self._forced("reorder_next", cmd) or self.rng.random() < f.p_reorder):
            self.counts["reordered"] += 1
            loop = asyncio.get_running_loop()
            timer = loop.call_later(f.reorder_hold_ms / 1000, self._release, tenant)
            self._held[tenant] = _Held(body, timer)
            for _ in range(copies - 1):
                self._post_later(t, body)
            return
        for _ in range(copies):
            self._post_later(t, body)
        if held is not None:  # the one held back goes after this one
            held.timer.cancel()
            self._post_later(t, held.body, after_s=0.005)

    def _forced(self, fault: str, cmd: str) -> bool:
        """Whether ``fault`` is still owed to the next callback of ``cmd`` (and owe one less)."""
        left = self.forced[fault]
        if left[cmd] <= 0:
            return False
        left[cmd] -= 1
        return True

    def _release(self, tenant: str) -> None:
        held, t = self._held.pop(tenant, None), self.by_name.get(tenant)
        if held is not None and t is not None:
            self._post_later(t, held.body)

    def _post_later(self, t: Tenant, body: bytes, after_s: float = 0.0) -> None:
        f = self.faults
        late = (f.late_ms + self.rng.uniform(0, f.late_jitter_ms)) / 1000
        if late > 0:
            self.counts["late"] += 1
        task = asyncio.get_running_loop().create_task(self._post(t, body, after_s + late))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, t: Tenant, body: bytes, after_s: float) -> None:
        if after_s > 0:
            await asyncio.sleep(after_s)
        assert t.callback_url and t.callback_secret
        if self.client is None:
            self.client = httpx.AsyncClient(timeout=5.0)
        signature = sign(t.callback_secret, body)
        for attempt in range(POST_ATTEMPTS):
            try:
                resp = await self.client.post(t.callback_url, content=body, headers={
                    "Content-Type": "application/json", "X-Signature": signature})
                if resp.status_code < 500:
                    self.counts["posted" if resp.status_code == 200 else f"refused_{resp.status_code}"] += 1
                    return
            except httpx.TransportError:
                pass
            self.counts["post_retries"] += 1
            await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
        self.counts["post_failed"] += 1

    def in_flight(self) -> int:
        return len(self._tasks) + len(self._held)

    def view(self) -> dict[str, Any]:
        return {**asdict(self.faults), **{name: {k: n for k, n in left.items() if n > 0}
                                          for name, left in self.forced.items()},
                "counts": dict(self.counts), "in_flight": self.in_flight()}

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self.client is not None:
            await self.client.aclose()


async def _answer(send: Send, status: int, doc: dict[str, Any]) -> None:
    body = json.dumps(doc).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def tenant_routes(app: FastAPI, tenants: Tenants) -> None:
    """The ``/_admin`` routes of tenants and callbacks (see module doc)."""

    async def body(request: Request) -> dict[str, Any]:
        doc = await request.json()
        if not isinstance(doc, dict):
            raise ValueError("body must be a JSON object")
        return doc

    @app.get("/_admin/tenants")
    async def list_tenants() -> list[dict[str, Any]]:
        return [t.view() for t in tenants.by_name.values()]

    @app.put("/_admin/tenants/{name}")
    async def put_tenant(name: str, request: Request) -> JSONResponse:
        try:
            doc = await body(request)
            allowed = {"credential", "callback_secret", "callback_url", "fail"}
            if unknown := set(doc) - allowed:
                raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
            t = replace(tenants.by_name.get(name, Tenant(name)), **doc)
        except (ValueError, TypeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        tenants.by_name[name] = t
        return JSONResponse(t.view())

    @app.delete("/_admin/tenants/{name}")
    async def delete_tenant(name: str) -> dict[str, Any]:
        return {"deleted": tenants.by_name.pop(name, None) is not None}

    @app.get("/_admin/callbacks")
    async def get_faults() -> dict[str, Any]:
        return tenants.view()

    @app.put("/_admin/callbacks")
    async def put_faults(request: Request) -> JSONResponse:
        try:
            doc = await body(request)
            forced = {name: {str(cmd): int(n) for cmd, n in dict(doc.pop(name, None) or {}).items()}
                      for name in FORCED}
            if bad := sorted(name for name, counts in forced.items() if any(n < 0 for n in counts.values())):
                raise ValueError(f"{', '.join(bad)} counts must be >= 0")
            tenants.faults = tenants.faults.updated(doc)
            for name, counts in forced.items():
                for cmd, n in counts.items():
                    tenants.forced[name][cmd] = n
        except (ValueError, TypeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(tenants.view())

    @app.post("/_admin/callbacks/emit")
    async def emit(request: Request) -> JSONResponse:
        try:
            doc = await body(request)
            tenant, cmd, guid = str(doc["tenant"]), str(doc["cmd"]), str(doc["guid"])
            data, count = dict(doc.get("data") or {}), int(doc.get("count", 1))
        except (ValueError, KeyError, TypeError) as exc:
            return JSONResponse({"error": f"need tenant, cmd, guid (data, count optional): {exc}"}, status_code=400)
        for _ in range(count):
            event = dict(data)
            if cmd == "message.received":
                event.setdefault("msgUid", f"m-{next(tenants._uids)}")
            tenants.emit(tenant, cmd, guid, event)
        return JSONResponse(tenants.view())
