"""One gateway client per tenant: its base URL, its credential, its breaker.

Senders send and the reconciler verifies through this: each call is routed to the item's
tenant's gateway with ``Authorization: Bearer <credential>``. Each tenant has its own
connection pool (a hung gateway holds only its own connections) and its own breaker (a
gateway that is down is refused at once, as a deferral that uses no attempt, instead of
every call waiting out a timeout), and its daily quota (``sends_per_day``, a soft limit: see
``domain.quota``; a tenant past it is deferred the same way until its day ends, as the
database counts its days). Clients follow the tenant table: a changed URL or credential gets a
new client on the next call.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import httpx

from pacer_common.domain.breaker import Breaker
from pacer_common.domain.customers import Customer
from pacer_common.domain.failures import FailureClass, Hushed, SendError
from pacer_common.domain.quota import DailyUsage
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.tenants import Tenant
from pacer_common.gateway import GatewayClient, MediaAnswer, Observe, SendDeadlinePassed, make_client

T = TypeVar("T")

UNKNOWN_RETRY_S = 5.0
QUOTA_RECHECK_S = 300.0
UNKNOWN_DAY_RETRY_S = 5.0  # a tenant over its quota by this sender's own sends, its day not read yet


def _gateway_failure(err: SendError) -> bool:
    """A failure of the gateway itself, not an answer about one message: no answer, a 5xx, an
    unreadable body, an HTTP 4xx without a code of its own (a credential or a route refused),
    also where a read made it retryable (its cause is that failure)."""
    if err.code is None and err.failure_class in (FailureClass.IN_DOUBT, FailureClass.NOT_SENT):
        return True
    return isinstance(err.__cause__, SendError) and _gateway_failure(err.__cause__)


def _circuit_open(tenant: str, wait: float) -> SendError:
    return SendError(FailureClass.RATE_LIMITED, None,
                     f"tenant {tenant!r}: its gateway is failing (circuit open); next try in {wait:.1f}s",
                     retry_after=timedelta(seconds=wait), deferred=True)


class TenantGateways:
    def __init__(self, tenants: Callable[[str], Tenant | None], timeout_s: float,
                 code_table: Mapping[int, FailureClass], observe: Observe | None = None,
                 max_connections: int = 200, breaker: Callable[[], Breaker] = Breaker,
                 clock: Callable[[], float] = time.monotonic, usage: DailyUsage | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        self.tenants = tenants
        self.timeout_s, self.code_table, self.observe = timeout_s, code_table, observe
        self.max_connections = max_connections
        self.new_breaker, self.clock = breaker, clock
        self.clients: dict[str, tuple[tuple[str, str | None], GatewayClient]] = {}
        self.breakers: dict[str, Breaker] = {}
        self.retired: list[httpx.AsyncClient] = []
        self.usage = usage or DailyUsage()  # sends per tenant today, against sends_per_day
        self.wall = wall  # epoch seconds, against the ends of the tenants' days

    def deferral(self, tenant: str, counted: bool = True) -> SendError | None:
        """Why a call of the tenant's (``counted``: a send, against its quota) would be deferred
        now, or None; nothing called or changed, no probe taken. Asked before an item is
        claimed: Pacer's own deferral then claims nothing, and a claim counts in the guid's send
        windows (a tenant's outage would otherwise use up its guids' hourly and daily caps)."""
        try:
            self._tenant(tenant)
            if counted:
                self._check_quota(tenant)
        except SendError as err:
            return err
        b = self.breakers.get(tenant)
        wait = None if b is None else b.blocked(self.clock())
        return None if wait is None else _circuit_open(tenant, wait)

    def _tenant(self, tenant: str) -> tuple[Tenant, str]:
        """The tenant and its gateway's base URL."""
        t = self.tenants(tenant)
        if t is None or not t.base_url:
            # A job's tenant exists (the planner checks it, and a tenant with jobs is never
            # deleted): this copy of the tenant table is older than the tenant, or its URL is
            # being set. A deferral, not a failure of the item.
            raise SendError(FailureClass.RATE_LIMITED, None,
                            f"tenant {tenant!r} not known here yet, or without a gateway URL; trying again shortly",
                            retry_after=timedelta(seconds=UNKNOWN_RETRY_S), deferred=True)
        return t, t.base_url

    def _for(self, tenant: str) -> GatewayClient:
        t, base_url = self._tenant(tenant)
        key = (base_url, t.credential.get_secret_value() if t.credential else None)
        held = self.clients.get(tenant)
        if held is not None and held[0] == key:
            return held[1]
        if held is not None:
            self.retired.append(held[1].client)  # closed at shutdown: calls in flight finish on it
        gw = GatewayClient(make_client(base_url, self.timeout_s, self.max_connections, t.credential),
                           self.code_table, observe=self.observe)
        self.clients[tenant] = (key, gw)
        return gw

    def breaker(self, tenant: str) -> Breaker:
        b = self.breakers.get(tenant)
        if b is None:
            b = self.breakers[tenant] = self.new_breaker()
        return b

    async def send_text(self, guid: str, to_id: str, content: str, idem_key: str,
                        deadline: float | None = None, tenant: str = "default") -> Receipt:
        return await self._guarded(tenant, True, lambda gw: gw.send_text(guid, to_id, content, idem_key, deadline))

    async def send_media(self, kind: str, guid: str, to_id: str, media_id: str, idem_key: str,
                         deadline: float | None = None, tenant: str = "default") -> Receipt:
        return await self._guarded(tenant, True,
                                   lambda gw: gw.send_media(kind, guid, to_id, media_id, idem_key, deadline))

    async def customer_tags(self, op: str, guid: str, customer_id: str, tag_ids: Sequence[str], idem_key: str,
                            deadline: float | None = None, tenant: str = "default") -> Receipt:
        return await self._guarded(tenant, True,
                                   lambda gw: gw.customer_tags(op, guid, customer_id, tag_ids, idem_key, deadline))

    async def customer_detail(self, guid: str, customer_id: str, idem_key: str,
                              deadline: float | None = None, tenant: str = "default") -> tuple[Receipt, Customer]:
        """A read, not a send: behind the tenant's breaker, outside its quota."""
        return await self._guarded(tenant, False, lambda gw: gw.customer_detail(guid, customer_id, idem_key, deadline))

    async def upload_media(self, guid: str, url: str, kind: str, file_name: str | None, idem_key: str,
                           tenant: str = "default") -> MediaAnswer:
        """Not a send: behind the tenant's breaker, outside its quota."""
        return await self._guarded(tenant, False, lambda gw: gw.upload_media(guid, url, kind, file_name, idem_key))

    async def media_status(self, guid: str, media_id: str, tenant: str = "default") -> MediaAnswer:
        return await self._guarded(tenant, False, lambda gw: gw.media_status(guid, media_id))

    async def _guarded(self, tenant: str, counted: bool, call: Callable[[GatewayClient], Awaitable[T]]) -> T:
        """One call to the tenant's gateway, behind its breaker (and, for a send, its quota)."""
        gw = self._for(tenant)
        if counted:
            self._check_quota(tenant)
        b = self.breaker(tenant)
        wait = b.wait(self.clock())
        if wait is not None:
            raise _circuit_open(tenant, wait)
        try:
            answer = await call(gw)
        except SendError as err:
            if isinstance(err.__cause__, SendDeadlinePassed):
                # Refused before writing, for this sender's own lateness (a busy or paused
                # process): it says nothing of the gateway, and counting it opened the breaker
                # for every send of the tenant under load (bench scale, 10,000 guids).
                b.probing = False
            else:
                b.record(_gateway_failure(err), self.clock())
            raise
        except BaseException:
            b.probing = False  # cancelled, not answered: says nothing; the next call may probe
            raise
        b.record(False, self.clock())
        if counted:
            self.usage.count(tenant)
        return answer

    def _check_quota(self, tenant: str) -> None:
        t = self.tenants(tenant)
        if t is None or t.sends_per_day is None:
            return
        wall = self.wall()
        if self.usage.allows(tenant, t.sends_per_day, wall):
            return
        # Not a failure of the item: it waits for the end of the tenant's day (or, with none
        # read yet, a few rounds of the usage loop), or a raised quota (re-read with the
        # tenant table), checked again at least every QUOTA_RECHECK_S.
        ends = self.usage.day_ends(tenant)
        until = datetime.fromtimestamp(ends, UTC).isoformat(timespec="seconds") if ends > wall else "its next count"
        raise SendError(FailureClass.RATE_LIMITED, None,
                        f"tenant {tenant!r} has used its quota of {t.sends_per_day} sends today (until {until})",
                        retry_after=timedelta(seconds=min(ends - wall if ends > wall else UNKNOWN_DAY_RETRY_S,
                                                          QUOTA_RECHECK_S)), deferred=True)

    async def lookup(self, guid: str, idem_key: str, tenant: str = "default") -> bool | Hushed | None:
        try:
            gw = self._for(tenant)
        except SendError:
            return None
        return await gw.lookup(guid, idem_key)

    def open_tenants(self) -> int:
        return sum(b.is_open for b in self.breakers.values())

    async def aclose(self) -> None:
        for c in [*self.retired, *(gw.client for _, gw in self.clients.values())]:
            await c.aclose()
        self.clients.clear()
        self.retired.clear()

