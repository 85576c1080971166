"""The WeComApi-style gateway client: a send becomes a receipt or a classified ``SendError``.

The transport is httpx's API on aiohttp (``httpx-aiohttp``), measured about ten times
faster than httpx's own at the concurrency a sender runs (see ``bench/gateway_client.py``).

The one distinction that matters for exactly-once: did the request possibly reach the
gateway? Only a failure to connect proves it did not (``NOT_SENT``); a timeout, a dropped
connection, a 5xx or an unreadable body after the request left may hide a delivery
(``IN_DOUBT``) and is verified, never resent blindly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import SecretStr, ValidationError

from pacer_common import tracing
from pacer_common.domain.customers import Customer
from pacer_common.domain.failures import FailureClass, SendError, classify
from pacer_common.domain.receipts import Receipt


def _provably_not_sent(exc: httpx.TransportError) -> bool:
    if isinstance(exc, httpx.PoolTimeout):
        return True
    if not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return False
    cause = exc.__cause__
    if cause is None:  # httpx's own transport: the connection was never made
        return True
    try:
        import aiohttp
    except ImportError:  # pragma: no cover
        return False
    # httpx-aiohttp maps every aiohttp connection error to ConnectTimeout, including a
    # server that dropped the connection after reading the request: only a connector
    # error (refused, unreachable, DNS) proves nothing was sent.
    return isinstance(cause, aiohttp.ClientConnectorError)


# The latest moment (time.monotonic()) at which the request in hand may still be written.
SEND_DEADLINE: ContextVar[float | None] = ContextVar("pacer_send_deadline", default=None)


class SendDeadlinePassed(Exception):
    """Raised before a single byte of the request is written: it was not sent."""


async def _refuse_late_send(session: object, ctx: object, params: object) -> None:
    # Runs once the connection is in hand, right before aiohttp writes the request. A
    # sender paused anywhere between claiming and here (GC, SIGSTOP, an overloaded loop)
    # may have been taken over meanwhile: then it must not send at all.
    deadline = SEND_DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline:
        raise SendDeadlinePassed(f"send deadline passed {time.monotonic() - deadline:.3f}s before writing")


def make_client(base_url: str, timeout_s: float, max_connections: int = 200,
                credential: SecretStr | None = None) -> httpx.AsyncClient:
    """A client of one gateway; with ``credential``, every call carries ``Authorization: Bearer``."""
    import aiohttp
    from httpx_aiohttp import AiohttpTransport

    def session() -> aiohttp.ClientSession:
        trace = aiohttp.TraceConfig()
        trace.on_connection_reuseconn.append(_refuse_late_send)
        trace.on_connection_create_end.append(_refuse_late_send)
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=max_connections), trace_configs=[trace])

    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    headers = {"Authorization": f"Bearer {credential.get_secret_value()}"} if credential else None
    return httpx.AsyncClient(
        base_url=base_url,
        headers=headers,
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
        transport=AiohttpTransport(limits=limits, client=session),
    )


# Called after every gateway request: (operation, result, seconds). ``result`` is the HTTP
# status class ("2xx", "4xx", "5xx") or "transport_error".
Observe = Callable[[str, str, float], None]


def _status_class(status: int) -> str:
    return f"{status // 100}xx" if 100 <= status < 600 else "other"


MEDIA_SEND_PATHS = {"image": "/message/sendImage", "file": "/message/sendFile", "video": "/message/sendVideo"}


@dataclass(frozen=True)
class MediaAnswer:
    media_id: str
    status: str  # pending, ready, failed
    reason: str | None
    latency_ms: float


def _media_answer(data: Mapping[str, Any], latency_ms: float) -> MediaAnswer:
    status = data.get("status")
    media_id = data.get("mediaId")
    if not isinstance(media_id, str) or not media_id or status not in ("pending", "ready", "failed"):
        raise SendError(FailureClass.RETRYABLE, None, f"unreadable media answer: {dict(data)!r:.200}")
    reason = data.get("reason")
    return MediaAnswer(media_id, str(status), None if reason is None else str(reason)[:500], latency_ms)


class GatewayClient:
    def __init__(self, client: httpx.AsyncClient, code_table: Mapping[int, FailureClass],
                 lookup_path: str = "/message/lookup", observe: Observe | None = None) -> None:
        self.client = client
        self.code_table = code_table
        self.lookup_path = lookup_path
        self.observe: Observe = observe or (lambda operation, result, seconds: None)

    async def send_text(self, guid: str, to_id: str, content: str, idem_key: str,
                        deadline: float | None = None, tenant: str = "default") -> Receipt:
        """Send, unless ``deadline`` (monotonic) passes before the request is written. A client
        is one tenant's gateway (``tenant_gateways`` routes by tenant): ``tenant`` is not used."""
        with tracing.span("gateway sendText", kind="client"):
            return await self._send("/message/sendText", {"guid": guid, "toId": to_id, "content": content},
                                    idem_key, deadline)

    async def send_media(self, kind: str, guid: str, to_id: str, media_id: str, idem_key: str,
                         deadline: float | None = None, tenant: str = "default") -> Receipt:
        """``/message/sendImage|sendFile|sendVideo`` by ``mediaId`` (only once the media is ready)."""
        path = MEDIA_SEND_PATHS[kind]
        with tracing.span(f"gateway {path.rsplit('/', 1)[-1]}", kind="client"):
            return await self._send(path, {"guid": guid, "toId": to_id, "mediaId": media_id}, idem_key, deadline)

    async def upload_media(self, guid: str, url: str, kind: str, file_name: str | None, idem_key: str,
                           tenant: str = "default") -> MediaAnswer:
        """``/media/upload``: the gateway's ``mediaId`` and whether it is ready yet."""
        body: dict[str, str] = {"guid": guid, "url": url, "kind": kind}
        if file_name is not None:
            body["fileName"] = file_name
        started = time.perf_counter()
        data = await self._call("/media/upload", body, idem_key, None, "media")
        return _media_answer(data, (time.perf_counter() - started) * 1000)

    async def media_status(self, guid: str, media_id: str, tenant: str = "default") -> MediaAnswer:
        """``/media/status``: ``pending``, ``ready`` or ``failed`` (with the gateway's reason)."""
        started = time.perf_counter()
        data = await self._call("/media/status", {"guid": guid, "mediaId": media_id}, f"media-status:{media_id}",
                                None, "media")
        return _media_answer(data | {"mediaId": data.get("mediaId", media_id)}, (time.perf_counter() - started) * 1000)

    async def customer_tags(self, op: str, guid: str, customer_id: str, tag_ids: Sequence[str], idem_key: str,
                            deadline: float | None = None, tenant: str = "default") -> Receipt:
        """``/customer/tags/add`` or ``/customer/tags/remove`` (``op``); idempotent by key."""
        with tracing.span(f"gateway tags.{op}", kind="client"):
            return await self._send(f"/customer/tags/{op}", {"guid": guid, "customerId": customer_id,
                                                              "tagIds": list(tag_ids)}, idem_key, deadline)

    async def customer_detail(self, guid: str, customer_id: str, idem_key: str,
                              deadline: float | None = None, tenant: str = "default") -> tuple[Receipt, Customer]:
        """``/customer/detail``: the customer with its version."""
        started = time.perf_counter()
        with tracing.span("gateway customer.detail", kind="client"):
            data = await self._call("/customer/detail", {"guid": guid, "customerId": customer_id}, idem_key,
                                    deadline, "send")
        try:
            customer = Customer.model_validate(data.get("customer"))
        except ValidationError as exc:
            raise SendError(FailureClass.RETRYABLE, None, f"unreadable customer: {exc.errors()[:2]}") from exc
        return Receipt(0, str(data.get("__msg", "")), None, (time.perf_counter() - started) * 1000), customer

    async def _send(self, path: str, body: dict[str, Any], idem_key: str, deadline: float | None) -> Receipt:
        started = time.perf_counter()
        data = await self._call(path, body, idem_key, deadline, "send")
        return Receipt(0, str(data.pop("__msg", "")), data.get("msgId"), (time.perf_counter() - started) * 1000)

    async def _call(self, path: str, body: Mapping[str, Any], idem_key: str, deadline: float | None,
                    operation: str) -> dict[str, Any]:
        """POST one action; its ``data`` (with the answer's ``msg`` as ``__msg``), or :class:`SendError`."""
        started = time.perf_counter()
        token = SEND_DEADLINE.set(deadline)
        try:
            resp = await self.client.post(path, json=body,
                                          headers={**tracing.http_headers(), "X-Idempotency-Key": idem_key})
        except SendDeadlinePassed as exc:
            raise SendError(FailureClass.NOT_SENT, None, str(exc)) from exc
        except httpx.TransportError as exc:
            self.observe(operation, "transport_error", time.perf_counter() - started)
            cls = FailureClass.NOT_SENT if _provably_not_sent(exc) else FailureClass.IN_DOUBT
            raise SendError(cls, None, f"{type(exc).__name__}: {exc}") from exc
        finally:
            SEND_DEADLINE.reset(token)
        self.observe(operation, _status_class(resp.status_code), time.perf_counter() - started)
        if resp.status_code >= 500:
            raise SendError(FailureClass.IN_DOUBT, None, f"HTTP {resp.status_code} from gateway")
        if resp.status_code == 429:
            raise SendError(FailureClass.RATE_LIMITED, None, "HTTP 429 from gateway")
        if resp.status_code >= 400:
            raise SendError(FailureClass.BAD_PARAMS, None, f"HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            answer = resp.json()
            code = int(answer["code"])
            data = dict(answer.get("data") or {})
        except (ValueError, KeyError, TypeError) as exc:
            raise SendError(FailureClass.IN_DOUBT, None, f"unreadable gateway response: {resp.text[:200]!r}") from exc
        msg = str(answer.get("msg", ""))
        if code != 0:
            raise SendError(classify(code, self.code_table), code, msg)
        data["__msg"] = msg
        return data

    async def lookup(self, guid: str, idem_key: str) -> bool | None:
        """Was this key delivered? ``True``/``False`` when the gateway knows, ``None`` when it can't say."""
        started = time.perf_counter()
        try:
            resp = await self.client.get(self.lookup_path, params={"guid": guid, "idempotencyKey": idem_key},
                                         headers={**tracing.http_headers(), "X-Idempotency-Key": idem_key})
        except httpx.TransportError:
            self.observe("lookup", "transport_error", time.perf_counter() - started)
            return None
        self.observe("lookup", _status_class(resp.status_code), time.perf_counter() - started)
        if resp.status_code != 200:
            return None
        try:
            body = resp.json()
            if int(body.get("code", -1)) != 0:
                return None
            return bool(body["data"]["found"])
        except (ValueError, KeyError, TypeError):
            return None
