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
from collections.abc import Callable, Mapping
from contextvars import ContextVar

import httpx
from pydantic import SecretStr

from pacer_common import tracing
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
            return await self._send_text(guid, to_id, content, idem_key, deadline)

    async def _send_text(self, guid: str, to_id: str, content: str, idem_key: str, deadline: float | None) -> Receipt:
        started = time.perf_counter()
        token = SEND_DEADLINE.set(deadline)
        try:
            resp = await self.client.post(
                "/message/sendText",
                json={"guid": guid, "toId": to_id, "content": content},
                headers={**tracing.http_headers(), "X-Idempotency-Key": idem_key},
            )
        except SendDeadlinePassed as exc:
            raise SendError(FailureClass.NOT_SENT, None, str(exc)) from exc
        except httpx.TransportError as exc:
            self.observe("send", "transport_error", time.perf_counter() - started)
            cls = FailureClass.NOT_SENT if _provably_not_sent(exc) else FailureClass.IN_DOUBT
            raise SendError(cls, None, f"{type(exc).__name__}: {exc}") from exc
        finally:
            SEND_DEADLINE.reset(token)
        self.observe("send", _status_class(resp.status_code), time.perf_counter() - started)
        latency = (time.perf_counter() - started) * 1000
        if resp.status_code >= 500:
            raise SendError(FailureClass.IN_DOUBT, None, f"HTTP {resp.status_code} from gateway")
        if resp.status_code == 429:
            raise SendError(FailureClass.RATE_LIMITED, None, "HTTP 429 from gateway")
        if resp.status_code >= 400:
            raise SendError(FailureClass.BAD_PARAMS, None, f"HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            body = resp.json()
            code = int(body["code"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SendError(FailureClass.IN_DOUBT, None, f"unreadable gateway response: {resp.text[:200]!r}") from exc
        msg = str(body.get("msg", ""))
        if code != 0:
            raise SendError(classify(code, self.code_table), code, msg)
        data = body.get("data") or {}
        return Receipt(code, msg, data.get("msgId"), latency)

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
