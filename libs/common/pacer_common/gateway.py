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

A redirect (3xx, never followed) was answered by whatever stands at the URL instead of acting
on the request — an ingress that only takes HTTPS, a moved route: not sent (``NOT_SENT``),
named with its target, and counted by the tenant's breaker as the gateway failing; but a 303
("see other") is a server's pointer to the result of a request it has handled: in doubt.

A rate-limited answer (HTTP 429, or a code the table maps to ``rate_limited``) carries the
gateway's ``Retry-After`` (delta-seconds or an HTTP-date, at most :data:`RETRY_AFTER_MAX`)
as ``SendError.retry_after``, for every action alike: the sender holds the whole guid that long
(and the item at least as long), and a lookup of the guid is not asked again until then.
"""

from __future__ import annotations

import json
import logging
import re
import reprlib
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import UTC, timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urljoin

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport
from pydantic import SecretStr, ValidationError

from pacer_common import tracing
from pacer_common.domain.customers import Customer
from pacer_common.domain.failures import RETRY_AFTER_MAX, FailureClass, Hushed, SendError, classify
from pacer_common.domain.receipts import Receipt

log = logging.getLogger(__name__)


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

_DELTA_SECONDS = re.compile(r"\s*(\d+(?:\.\d*)?)\s*")
# Redirect targets logged so far by a client, at most this many (each is logged once).
_REDIRECTS_LOGGED = 100


def retry_after(value: str | None, wall: float) -> timedelta | None:
    """How long a ``Retry-After`` header asks to wait, at ``wall`` (epoch seconds): its
    delta-seconds, or the time to its HTTP-date (``Wed, 21 Oct 2026 07:28:00 GMT``), at most
    :data:`RETRY_AFTER_MAX`. None for no header, one not understood, or a wait already over:
    the default back-off then applies."""
    if value is None:
        return None
    if (m := _DELTA_SECONDS.fullmatch(value)) is not None:
        seconds = float(m.group(1))
    else:
        try:
            when = parsedate_to_datetime(value.strip())
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        seconds = (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp() - wall
    if not seconds > 0:
        return None
    return timedelta(seconds=min(seconds, RETRY_AFTER_MAX.total_seconds()))


def _with_retry_after(err: SendError, value: str | None, wall: float) -> SendError:
    """A rate-limited ``err`` with the wait the answer's ``Retry-After`` (``value``) asks
    for, and the header in its message; any other error as it is."""
    if err.failure_class is not FailureClass.RATE_LIMITED or value is None:
        return err
    wait = retry_after(value, wall)
    shown = value.strip()[:64]
    if wait is None:
        note = f"Retry-After {shown!r} not understood or already past: ignored"
    else:
        note = f"Retry-After {shown}: quiet for {wait.total_seconds():g} s"
        if wait >= RETRY_AFTER_MAX:
            note += f" (at most {RETRY_AFTER_MAX.total_seconds():g} s)"
    return replace(err, message=f"{err.message} ({note})", retry_after=wait)


def _read_answer(raw: bytes) -> tuple[int, str, dict[str, Any]]:
    """A gateway answer's code, msg and data. Raises whatever reading it raises: anything a
    body can do to a parser (``ValueError``, a nesting too deep for it, a code of ``1e999``)
    is the caller's to classify."""
    answer = json.loads(raw)
    return int(answer["code"]), str(answer.get("msg", "")), dict(answer.get("data") or {})


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
        raise SendError(FailureClass.RETRYABLE, None, f"unreadable media answer: {reprlib.repr(dict(data)):.200}")
    reason = data.get("reason")
    return MediaAnswer(media_id, str(status), None if reason is None else str(reason)[:500], latency_ms)


class GatewayClient:
    def __init__(self, client: GatewayHttp, code_table: Mapping[int, FailureClass],
                 lookup_path: str = "/message/lookup", observe: Observe | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.client = client
        self.code_table = code_table
        self.lookup_path = lookup_path
        self.observe: Observe = observe or (lambda operation, result, seconds: None)
        self.clock, self.wall = clock, wall
        # guid → when (``clock``) the quiet its lookup's rate limit asked for ends: until then
        # its lookups are not asked at all (the senders hold their guids by their own pacers).
        self.quiet: dict[str, float] = {}
        self.redirects_logged: set[str] = set()

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
                hint, location = resp.headers.get("Retry-After"), resp.headers.get("Location")
        except SendDeadlinePassed as exc:  # Pacer's own lateness: nothing written, the gateway said nothing
            raise SendError(FailureClass.NOT_SENT, None, str(exc), deferred=True) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.observe(operation, "transport_error", time.perf_counter() - started)
            cls = FailureClass.NOT_SENT if _provably_not_sent(exc) else FailureClass.IN_DOUBT
            raise SendError(cls, None, f"{type(exc).__name__}: {exc}") from exc
        finally:
            SEND_DEADLINE.reset(token)
        self.observe(operation, _status_class(status), time.perf_counter() - started)
        try:
            return self._answered(path, status, raw, location)
        except SendError as err:
            limited = _with_retry_after(err, hint, self.wall())
            if limited is err:
                raise
            raise limited from err.__cause__

    def _answered(self, path: str, status: int, raw: bytes, location: str | None = None) -> dict[str, Any]:
        """What an HTTP answer says: the action's ``data`` (with the answer's ``msg`` as
        ``__msg``), or :class:`SendError` (module docstring)."""
        if status >= 500:
            raise SendError(FailureClass.IN_DOUBT, None, f"HTTP {status} from gateway")
        if status == 429:
            raise SendError(FailureClass.RATE_LIMITED, None, "HTTP 429 from gateway")
        if status >= 400:
            raise self._refused(status, raw)
        if 300 <= status < 400:
            raise self._redirected(path, status, location)
        try:
            code, msg, data = _read_answer(raw)
        except Exception as exc:  # any body the request got back: it reached the gateway
            raise SendError(FailureClass.IN_DOUBT, None, f"unreadable gateway response ({type(exc).__name__}): "
                                                         f"{_text(raw)[:200]!r}") from exc
        if code != 0:
            raise SendError(classify(code, self.code_table), code, msg)
        data["__msg"] = msg
        return data

    def _redirected(self, path: str, status: int, location: str | None) -> SendError:
        """A redirect, not followed. Whatever answered it (an ingress that only takes HTTPS, a
        moved route) did not act on the request: not sent, and a failure of the tenant's
        gateway for its breaker (no code), logged once per target. A 303 ("see other") is a
        server's pointer to the result of a request it has handled: in doubt."""
        target = urljoin(f"{self.client.origin}{path}", location)[:300] if location else "(no Location)"
        if status == 303:
            return SendError(FailureClass.IN_DOUBT, None,
                             f"HTTP 303 from gateway (see other: {target}): it may have acted on the request")
        if target not in self.redirects_logged and len(self.redirects_logged) < _REDIRECTS_LOGGED:
            self.redirects_logged.add(target)
            log.error("gateway %s answers %s with HTTP %d, a redirect to %s: not followed, so nothing is sent "
                      "there; set the gateway's URL (PACER_GATEWAY_URL, or the tenant's base URL) to where it "
                      "points", self.client.origin, path, status, target)
        return SendError(FailureClass.NOT_SENT, None,
                         f"HTTP {status} from gateway: redirected to {target}, not followed (nothing acted on the "
                         "request); check the gateway URL")

    def _refused(self, status: int, raw: bytes) -> SendError:
        """An HTTP 4xx other than 429. A gateway answer's code of the code table decides. A 401
        is the tenant's credential refused, whatever else the body says: not sent, and counted
        by the tenant's breaker. Another code is the gateway's answer about this request, read
        as a 200 answer's would be (its code kept: not the gateway failing). Without a code:
        the request's own fault (``BAD_PARAMS_STATUSES``); refused before anything acted
        (``REFUSALS``: a route, a method, a proxy's refusal): not sent; any other status may
        hide a request under way (a 409 of a key still being processed): in doubt."""
        code: int | None
        try:
            code, msg, _ = _read_answer(raw)
        except Exception:  # any body that is no gateway answer: the status decides
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

    async def lookup(self, guid: str, idem_key: str) -> bool | Hushed | None:
        """Was this key delivered? ``True``/``False`` when the gateway knows, ``None`` when it
        can't say, :class:`Hushed` when it asked for quiet on the guid (a lookup it refused
        with ``Retry-After``, or one not asked while that quiet lasts). ``POST`` with a JSON
        body like every action (same headers, same encoding). Only a JSON boolean ``found`` is
        an answer: ``null``, ``0`` or ``""`` taken for "not delivered" would have the item
        sent again, ``"false"`` taken for "delivered" would confirm a send that never happened."""
        if (left := self.quiet.get(guid, float("-inf")) - self.clock()) > 0:
            return Hushed(left)  # the gateway asked for quiet on this guid: not asked until it is over
        try:
            data = await self._call(self.lookup_path, {"guid": guid, "idempotencyKey": idem_key}, idem_key, None,
                                    "lookup")
        except SendError as err:
            if err.gateway_rate_limit and err.retry_after is not None:
                wait = err.retry_after.total_seconds()
                self._hush(guid, self.clock() + wait)
                return Hushed(wait)
            return None
        found = data.get("found")
        return found if isinstance(found, bool) else None

    def _hush(self, guid: str, until: float) -> None:
        """No lookup of ``guid`` until ``until`` (``clock``); quiets that are over are
        forgotten once many are kept."""
        if len(self.quiet) >= 10_000:
            now = self.clock()
            self.quiet = {g: t for g, t in self.quiet.items() if t > now}
        self.quiet[guid] = max(until, self.quiet.get(guid, until))


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")
