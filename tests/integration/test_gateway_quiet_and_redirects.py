"""Gateway answers over real HTTP: a rate limit's ``Retry-After`` holds the guid that long
(every action reads it; a sender keeps the whole guid quiet, at the fake gateway too), a
redirect is not sent and counts against the tenant's gateway, a body no parser survives
leaves the send in doubt, not the sender stuck."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any

import httpx
import psycopg
from fastapi import FastAPI, Request, Response
from pydantic import SecretStr

from pacer_common.db.pool import open_pool
from pacer_common.domain.breaker import Breaker
from pacer_common.domain.failures import DEFAULT_CODE_TABLE, FailureClass, Hushed, RetryPolicy, SendError
from pacer_common.domain.tenants import Tenant
from pacer_common.gateway import GatewayClient, make_client
from pacer_common.tenant_gateways import TenantGateways
from pacer_dev.fakegateway.process import running_fake_gateway
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.adapters.queue import PostgresGuidQueue
from pacer_sender.core import Executor
from pacer_sender.dispatcher import Dispatcher
from pacer_sender.domain.pacing import Limits
from pacer_sender.leases import GuidLeases
from tests.integration.helpers import eventually, on_stub, seed_job

TTL = timedelta(seconds=30)
F = FailureClass


def answering(status: int, body: bytes, headers: dict[str, str] | None = None) -> tuple[FastAPI, list[str]]:
    """A gateway answering every action with this; the paths it was asked, in order."""
    app, asked = FastAPI(), []

    @app.post("/{path:path}")
    async def any_action(path: str) -> Response:
        asked.append(f"/{path}")
        return Response(body, status_code=status, headers=headers or {}, media_type="application/json")

    return app, asked


async def failure(call: Awaitable[Any]) -> SendError:
    try:
        await call
    except SendError as err:
        return err
    raise AssertionError("the call succeeded")


def test_every_action_rate_limited_with_a_retry_after_carries_the_wait() -> None:
    """Sends, uploads, status polls, tag changes and customer reads: one reading of the header,
    an HTTP 429's or a rate-limited code's."""
    async def scenario(url: str) -> list[tuple[F, timedelta | None]]:
        client = make_client(url, 2.0)
        gw = GatewayClient(client, DEFAULT_CODE_TABLE)
        try:
            errors = [await failure(call) for call in (
                gw.send_text("g", "r", "hi", "k1"), gw.send_media("image", "g", "r", "m1", "k2"),
                gw.upload_media("g", "https://x/a.png", "image", None, "k3"), gw.media_status("g", "m1"),
                gw.customer_tags("add", "g", "c", ["t"], "k4"), gw.customer_detail("g", "c", "k5"))]
        finally:
            await client.aclose()
        return [(e.failure_class, e.retry_after) for e in errors]

    app, asked = answering(429, b"", {"Retry-After": "7"})
    assert on_stub(app, scenario) == [(F.RATE_LIMITED, timedelta(seconds=7))] * 6
    assert len(asked) == 6
    app, _ = answering(200, b'{"code": 45009, "msg": "freq limit"}', {"Retry-After": "3"})
    assert on_stub(app, scenario) == [(F.RATE_LIMITED, timedelta(seconds=3))] * 6
    app, _ = answering(429, b"", {"Retry-After": "whenever"})
    assert on_stub(app, scenario) == [(F.RATE_LIMITED, None)] * 6, "not understood: the default back-off"


def test_a_lookup_rate_limited_with_a_retry_after_is_not_asked_again_until_the_quiet_is_over() -> None:
    """The verifier asks about an in-doubt item every second; the gateway asked for two of quiet."""
    app, asked = FastAPI(), []

    @app.post("/message/lookup")
    async def lookup(request: Request) -> Response:
        asked.append((await request.json())["guid"])
        if len(asked) == 1:
            return Response(b"", status_code=429, headers={"Retry-After": "2"})
        return Response(b'{"code": 0, "msg": "ok", "data": {"found": true}}', media_type="application/json")

    now = [100.0]

    async def scenario(url: str) -> list[bool | Hushed | None]:
        client = make_client(url, 2.0)
        gw = GatewayClient(client, DEFAULT_CODE_TABLE, clock=lambda: now[0])
        try:
            found = [await gw.lookup("g", "k"), await gw.lookup("g", "k")]
            now[0] += 1.9
            found.append(await gw.lookup("g", "k"))
            found.append(await gw.lookup("other", "k2"))  # another guid: asked
            now[0] += 0.2
            found.append(await gw.lookup("g", "k"))
            return found
        finally:
            await client.aclose()

    found = on_stub(app, scenario)
    assert found[3:] == [True, True]
    assert [round(h.seconds, 3) for h in found[:3] if isinstance(h, Hushed)] == [2.0, 2.0, 0.1], (
        "each answer in the quiet says what is left of it, for the guid's lease row")
    assert asked == ["g", "other", "g"], "the guid's lookups waited out the quiet the gateway asked for"


def test_a_redirect_is_not_sent_names_its_target_and_opens_the_tenants_breaker() -> None:
    """``PACER_GATEWAY_URL=http://…`` behind an ingress that redirects to HTTPS: every send is
    refused, not put in doubt (a lookup would hit the same redirect and leave it unverified),
    and the tenant's breaker opens as for a gateway that is down."""
    app, asked = answering(308, b"", {"Location": "https://gw.example/message/sendText"})
    tenant = Tenant("default", "", SecretStr("cred"))

    async def scenario(url: str) -> tuple[list[SendError], bool | Hushed | None]:
        gws = TenantGateways(lambda name: Tenant("default", url, tenant.credential), 2.0, DEFAULT_CODE_TABLE,
                             breaker=lambda: Breaker(3, 60.0))
        try:
            errors = [await failure(gws.send_text("g", "r", "hi", f"k{n}")) for n in range(4)]
            return errors, await gws.lookup("g", "k0")
        finally:
            await gws.aclose()

    errors, found = on_stub(app, scenario)
    assert [(e.failure_class, e.deferred) for e in errors[:3]] == [(F.NOT_SENT, False)] * 3
    assert "redirected to https://gw.example/message/sendText" in errors[0].message
    assert errors[3].deferred and "circuit open" in errors[3].message, "the breaker opened after three"
    assert found is None
    assert asked.count("/message/sendText") == 3


def test_a_send_answered_with_a_body_no_parser_survives_goes_to_verification_not_an_internal_error(
        database_url: str) -> None:
    """Nested deeper than the parser goes, or a code of 1e999: the request reached the gateway.
    The item is in doubt (recovery_pending, verified) at once, not left submitted until its
    lease runs out."""
    deep = b'{"code": 0, "data": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    outcomes = []
    for body in (deep, b'{"code": 1e999, "msg": "x"}'):
        _, _, (item,) = seed_job(database_url, {"g-odd": 1})
        app, _ = answering(200, body)

        async def scenario(url: str) -> str:
            pool = await open_pool(database_url, min_size=1, max_size=2)
            http = make_client(url, 2.0)
            try:
                await PostgresGuidLeases(pool, TTL).acquire(["g-odd"], "s-odd")
                (cmd,) = (await PostgresGuidQueue(pool).next_ready("g-odd", [], 10)).commands
                executor = Executor(PostgresItemRepository(pool, TTL), GatewayClient(http, DEFAULT_CODE_TABLE),
                                    "s-odd", RetryPolicy(), send_deadline_s=TTL.total_seconds() / 4)
                done = await executor.execute(cmd)
                await PostgresGuidLeases(pool, TTL).release(["g-odd"], "s-odd")
                return done.outcome
            finally:
                await http.aclose()
                await pool.close()

        outcomes.append(on_stub(app, scenario))
        with psycopg.connect(database_url) as conn:
            row = conn.execute("SELECT status, last_error_class, last_error FROM items WHERE item_id = %s",
                               (item,)).fetchone()
        assert row is not None and row[:2] == ("recovery_pending", "in_doubt"), row
        assert "unreadable gateway response" in row[2]
    assert outcomes == ["in_doubt", "in_doubt"]


def test_a_429_with_retry_after_holds_the_whole_guid_that_long_at_the_gateway(database_url: str) -> None:
    """The fake gateway limits the guid to one send a second, Pacer paces it at 0.2 s, and a
    rate-limited send is answered HTTP 429 with ``Retry-After: 2``, the guid to keep quiet that
    long (each send of it meanwhile counted in ``quiet_violations``). A sender that held only
    the refused item would send the guid's next item 0.4 s later, inside the quiet."""
    guid, owner, quiet = "g-quiet", "s-quiet", 2
    _, _, items = seed_job(database_url, {guid: 3})
    with running_fake_gateway(guid_min_interval_ms={guid: 1000}, retry_after_s=quiet) as url:
        def stats() -> dict[str, Any]:
            return dict(httpx.get(f"{url}/_admin/stats").json())

        async def scenario() -> None:
            pool = await open_pool(database_url, min_size=1, max_size=4)
            http = make_client(url, 5.0)
            executor = Executor(PostgresItemRepository(pool, TTL), GatewayClient(http, DEFAULT_CODE_TABLE), owner,
                                RetryPolicy(), send_deadline_s=TTL.total_seconds() / 4)
            d = Dispatcher(executor, lambda g: Limits(min_interval_s=0.2, jitter_s=0.0, online_reserve=0.0),
                           GuidLeases(PostgresGuidLeases(pool, TTL), owner, TTL.total_seconds()),
                           PostgresGuidQueue(pool), guid_cap=10)
            d.ring(guid)

            async def settled() -> bool:  # the item after the 429 went, or went too soon
                s = await asyncio.to_thread(stats)
                return s["sends"] == 2 or s["quiet_violations"] > 0

            try:
                await eventually(settled, 30, "a send after the rate limit")
            finally:
                await d.release(lambda g: True)
                await http.aclose()
                await pool.close()

        started = time.monotonic()
        asyncio.run(scenario())
        s = stats()
        sends = httpx.get(f"{url}/_admin/sends", params={"guid": guid}).json()["sends"]
    assert s["quiet_asked"] == 1, s
    assert s["quiet_violations"] == 0, f"the guid was sent to inside the quiet its 429 asked for: {s}"
    assert len(sends) == 2 and sends[1]["at_mono"] - sends[0]["at_mono"] >= quiet, sends
    assert time.monotonic() - started < 30
    with psycopg.connect(database_url) as conn:
        limited = conn.execute(
            "SELECT last_error, extract(epoch FROM next_attempt_at - updated_at) FROM items"
            " WHERE item_id = ANY(%s) AND status = 'waiting_retry'", (items,)).fetchall()
    assert len(limited) == 1 and "Retry-After 2" in limited[0][0], limited
    assert limited[0][1] >= quiet - 0.5, "the refused item waits the quiet too, past the default back-off (≤ 1 s)"
