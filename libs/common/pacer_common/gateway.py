"""The WeComApi-style gateway client: a send becomes a receipt or a classified ``SendError``.

A client of one gateway (:func:`make_client`) is httpx's API on an aiohttp session
(``httpx-aiohttp``), and the send itself — the one call per item — goes to that same
session directly: through httpx's API an aiohttp request costs about three times the CPU
(``bench/gateway_client.py``: 357 µs against 126 µs for this send, 119 µs for a bare
aiohttp post), and the send is the sender's hot path. Every call (sends, media, tags,
customer reads, lookups) goes that way, ``POST {base}{path}`` with a JSON body, as the gateway
contract has it (DESIGN.md, "Gateway contract, all actions"); httpx's API shares the session's
connection pool, timeouts and credential.

The one distinction that matters for exactly-once: did the request possibly reach the
gateway? Only a failure to connect proves it did not (``NOT_SENT``): refused, unreachable, or
no connection in hand within the connect timeout (waiting for the pool, or the TCP connect). A
read timeout, a dropped connection, a 5xx or an unreadable body after the request left may
hide a delivery (``IN_DOUBT``) and is verified, never resent blindly — except for a read
(``/customer/detail``), which is harmless to repeat: retried (``RETRYABLE``) instead.

An HTTP 4xx other than 429 is classified by the gateway's code when its body is a gateway
answer with a code of the code table. A 401 otherwise is the tenant's credential refused (a
credential rotated at the gateway): not sent (``NOT_SENT``), retried within the item's
attempts and counted by the tenant's breaker, never a permanent failure of every item of the
tenant. Another code is the gateway's answer about the request, read as a 200 answer's code
is (kept, so not counted as the gateway failing). Without a code, 400, 413, 415 and 422 say
the request itself is wrong (``BAD_PARAMS``); 403, 404, 405 and 408 were refused before
anything acted (a route, a method, a proxy: ``NOT_SENT``); any other (a 409 of a key still
being processed) may hide a request under way (``IN_DOUBT``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport
from pydantic import SecretStr, ValidationError

from pacer_common import tracing
from pacer_common.domain.customers import Customer
from pacer_common.domain.failures import FailureClass, SendError, classify
from pacer_common.domain.receipts import Receipt


def _provably_not_sent(exc: BaseException) -> bool:
    """Whether a failed call proves its request was never written: an aiohttp connector error
    (refused, unreachable, DNS), aiohttp's ``ConnectionTimeoutError``, or, on httpx's own
    transport, a failure to connect at all. aiohttp raises ``ConnectionTimeoutError`` only
    around ``connector.connect`` (the wait for a pooled connection and the TCP connect; our
    ``_DeadlineConnector`` writes nothing either), before the request is written, and never
    retries a POST on another connection. Its sibling ``SocketTimeoutError`` (both are
    ``ServerTimeoutError``), a read timeout after the request left, a server that dropped the
    connection after reading the request, anything after the request left: in doubt."""
    if isinstance(exc, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)):
        return True
    if isinstance(exc, httpx.PoolTimeout):
        return True
    if not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return False
    cause = exc.__cause__
    if cause is None:  # httpx's own transport: the connection was never made
        return True
    # httpx-aiohttp maps every aiohttp connection error to ConnectTimeout, including a
    # server that dropped the connection after reading the request.
    return isinstance(cause, aiohttp.ClientConnectorError)


# The latest moment (time.monotonic()) at which the request in hand may still be written.
SEND_DEADLINE: ContextVar[float | None] = ContextVar("pacer_send_deadline", default=None)


class SendDeadlinePassed(Exception):
    """Raised before a single byte of the request is written: it was not sent."""


class _DeadlineConnector(aiohttp.TCPConnector):
    """Hands a connection over only while the send's deadline (``SEND_DEADLINE``) has not
    passed: aiohttp writes the request right after it has the connection in hand. A sender
    paused anywhere between claiming and here (GC, SIGSTOP, an overloaded loop) may have been
    taken over meanwhile: then it must not send at all."""

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        conn = await super().connect(req, traces, timeout)
        deadline = SEND_DEADLINE.get()
        if deadline is not None and time.monotonic() > deadline:
            conn.release()  # nothing was written on it: it goes back to the pool
            raise SendDeadlinePassed(f"send deadline passed {time.monotonic() - deadline:.3f}s before writing")
        return conn


# An idle connection is closed by us before the common server idle timeouts (uvicorn's and
# httpx's 5 s) can close it under us: a POST written on a connection the server is dropping
# fails as "server disconnected" — in doubt, to be verified — though nothing was wrong. With
# aiohttp's 15 s, paced bursts 10 s apart lost every pooled connection at once (bench scale).
KEEPALIVE_S = 4.0


class GatewayHttp(httpx.AsyncClient):
    """A client of one gateway: httpx's API on an aiohttp session, and that session itself
    (:meth:`session`) for the send."""

    def __init__(self, base_url: str, timeout_s: float, max_connections: int = 200,
                 credential: SecretStr | None = None) -> None:
        self.origin = base_url.rstrip("/")
        self.auth_headers = {"Authorization": f"Bearer {credential.get_secret_value()}"} if credential else {}
        # What httpx.Timeout(timeout_s, connect=min(timeout_s, 5)) amounts to on aiohttp
        # (httpx-aiohttp's mapping): the pool wait, the TCP connect, each read.
        self.send_timeout = aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_connect=min(timeout_s, 5.0),
                                             sock_read=timeout_s)
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        super().__init__(base_url=base_url, timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
                         transport=AiohttpTransport(limits=limits, client=self.session))

    def session(self) -> aiohttp.ClientSession:
        """The aiohttp session (made on first use, on the event loop that uses it)."""
        if self._session is None:
            connector = _DeadlineConnector(limit=self.max_connections, keepalive_timeout=KEEPALIVE_S)
            self._session = aiohttp.ClientSession(connector=connector, headers=self.auth_headers,
                                                  timeout=self.send_timeout)
        return self._session

    async def aclose(self) -> None:
        await super().aclose()
        if self._session is not None:
            await self._session.close()


def make_client(base_url: str, timeout_s: float, max_connections: int = 200,
                credential: SecretStr | None = None) -> GatewayHttp:
    """A client of one gateway; with ``credential``, every call carries ``Authorization: Bearer``."""
    return GatewayHttp(base_url, timeout_s, max_connections, credential)


# Called after every gateway request: (operation, result, seconds). ``result`` is the HTTP
# status class ("2xx", "4xx", "5xx") or "transport_error".
Observe = Callable[[str, str, float], None]


def _status_class(status: int) -> str:
    return f"{status // 100}xx" if 100 <= status < 600 else "other"


# HTTP 4xx statuses that say the request itself is wrong, when the body carries no gateway code.
BAD_PARAMS_STATUSES = frozenset({400, 413, 415, 422})
# What another 4xx without a gateway code says (the refusal is not the request's own fault).
REFUSALS = {401: "credential refused", 403: "forbidden", 404: "no such route", 405: "method not allowed",
            408: "request timed out before it was read"}

MEDIA_SEND_PATHS = {"image": "/message/sendImage", "file": "/message/sendFile", "video": "/message/sendVideo"}


@dataclass(frozen=True)
class MediaAnswer:
    media_id: str
    status: str  # pending, ready, failed
    reason: str | None
    latency_ms: float


def failed_upload(url_hash: str, reason: str) -> MediaAnswer:
    """An upload the gateway refused (bad params): no media id came back, so the record takes
    one of its own per url (a guid's media ids are unique), never a shared placeholder."""
    return MediaAnswer(f"-{url_hash}", "failed", reason, 0.0)


def _media_answer(data: Mapping[str, Any], latency_ms: float) -> MediaAnswer:
    status = data.get("status")
    media_id = data.get("mediaId")
    if not isinstance(media_id, str) or not media_id or status not in ("pending", "ready", "failed"):
        raise SendError(FailureClass.RETRYABLE, None, f"unreadable media answer: {dict(data)!r:.200}")
    reason = data.get("reason")
    return MediaAnswer(media_id, str(status), None if reason is None else str(reason)[:500], latency_ms)


class GatewayClient:
    def __init__(self, client: GatewayHttp, code_table: Mapping[int, FailureClass],
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
        """``/customer/detail``: the customer with its version. A read: a failure that would
        leave a send in doubt (no answer, a 5xx, an unreadable body) is retryable instead, as
        nothing needs verifying (a lookup could only confirm a sync that wrote nothing)."""
        started = time.perf_counter()
        with tracing.span("gateway customer.detail", kind="client"):
            try:
                data = await self._call("/customer/detail", {"guid": guid, "customerId": customer_id}, idem_key,
                                        deadline, "send")
            except SendError as err:
                if err.failure_class is not FailureClass.IN_DOUBT:
                    raise
                raise replace(err, failure_class=FailureClass.RETRYABLE,
                              message=f"customer read failed, read again: {err.message}") from err
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
        """POST one action; its ``data`` (with the answer's ``msg`` as ``__msg``), or :class:`SendError`.
        The body as httpx would encode it (compact, UTF-8), straight on the aiohttp session."""
        raw_body = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        headers = {**tracing.http_headers(), "X-Idempotency-Key": idem_key, "Content-Type": "application/json"}
        started = time.perf_counter()
        token = SEND_DEADLINE.set(deadline)
        try:
            async with self.client.session().post(f"{self.client.origin}{path}", data=raw_body, headers=headers,
                                                  allow_redirects=False) as resp:
                status, raw = resp.status, await resp.read()
        except SendDeadlinePassed as exc:
            raise SendError(FailureClass.NOT_SENT, None, str(exc)) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.observe(operation, "transport_error", time.perf_counter() - started)
            cls = FailureClass.NOT_SENT if _provably_not_sent(exc) else FailureClass.IN_DOUBT
            raise SendError(cls, None, f"{type(exc).__name__}: {exc}") from exc
        finally:
            SEND_DEADLINE.reset(token)
        self.observe(operation, _status_class(status), time.perf_counter() - started)
        if status >= 500:
            raise SendError(FailureClass.IN_DOUBT, None, f"HTTP {status} from gateway")
        if status == 429:
            raise SendError(FailureClass.RATE_LIMITED, None, "HTTP 429 from gateway")
        if status >= 400:
            raise self._refused(status, raw)
        try:
            answer = json.loads(raw)
            code = int(answer["code"])
            data = dict(answer.get("data") or {})
        except (ValueError, KeyError, TypeError) as exc:
            raise SendError(FailureClass.IN_DOUBT, None, f"unreadable gateway response: {_text(raw)[:200]!r}") from exc
        msg = str(answer.get("msg", ""))
        if code != 0:
            raise SendError(classify(code, self.code_table), code, msg)
        data["__msg"] = msg
        return data

    def _refused(self, status: int, raw: bytes) -> SendError:
        """An HTTP 4xx other than 429. A gateway answer's code of the code table decides. A 401
        is the tenant's credential refused, whatever else the body says: not sent, and counted
        by the tenant's breaker. Another code is the gateway's answer about this request, read
        as a 200 answer's would be (its code kept: not the gateway failing). Without a code:
        the request's own fault (``BAD_PARAMS_STATUSES``); refused before anything acted
        (``REFUSALS``: a route, a method, a proxy's refusal): not sent; any other status may
        hide a request under way (a 409 of a key still being processed): in doubt."""
        try:
            answer = json.loads(raw)
            code: int | None = int(answer["code"])
            msg = str(answer.get("msg", ""))
        except (ValueError, KeyError, TypeError):
            code, msg = None, _text(raw)[:200]
        if code is not None and code in self.code_table:
            return SendError(classify(code, self.code_table), code, msg)
        if status == 401:
            return SendError(FailureClass.NOT_SENT, None, f"HTTP 401 from gateway: {REFUSALS[401]}: {msg}")
        if status in BAD_PARAMS_STATUSES:
            return SendError(FailureClass.BAD_PARAMS, code, f"HTTP {status}: {msg}")
        if code is not None:
            return SendError(classify(code, self.code_table), code, f"HTTP {status}: {msg}")
        if status in REFUSALS:
            return SendError(FailureClass.NOT_SENT, None, f"HTTP {status} from gateway: {REFUSALS[status]}: {msg}")
        return SendError(FailureClass.IN_DOUBT, None, f"HTTP {status} from gateway: {msg}")

    async def lookup(self, guid: str, idem_key: str) -> bool | None:
        """Was this key delivered? ``True``/``False`` when the gateway knows, ``None`` when it
        can't say. ``POST`` with a JSON body like every action (same headers, same encoding).
        Only a JSON boolean ``found`` is an answer: ``null``, ``0`` or ``""`` taken for "not
        delivered" would have the item sent again, ``"false"`` taken for "delivered" would
        confirm a send that never happened."""
        try:
            data = await self._call(self.lookup_path, {"guid": guid, "idempotencyKey": idem_key}, idem_key, None,
                                    "lookup")
        except SendError:
            return None
        found = data.get("found")
        return found if isinstance(found, bool) else None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")
