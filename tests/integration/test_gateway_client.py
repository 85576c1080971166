"""The gateway client against the real fake-gateway server: what counts as sent, and when."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from pydantic import SecretStr

from pacer_common.domain.failures import DEFAULT_CODE_TABLE, FailureClass, Hushed, SendError
from pacer_common.gateway import GatewayClient, make_client
from pacer_dev.fakegateway.process import free_port, running_fake_gateway
from tests.integration.helpers import on_stub, serving


def send(url: str, deadline: float | None, key: str) -> object:
    async def go() -> object:
        client = make_client(url, 2.0)
        try:
            return await GatewayClient(client, DEFAULT_CODE_TABLE).send_text("g1", "r1", "hi", key, deadline=deadline)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_a_send_past_its_deadline_is_refused_before_anything_is_written() -> None:
    with running_fake_gateway() as url:
        with pytest.raises(SendError) as err:
            send(url, time.monotonic() - 0.001, "late")
        assert err.value.failure_class is FailureClass.NOT_SENT
        stats = httpx.get(f"{url}/_admin/stats").json()
        assert stats["sends"] == 0, "nothing may reach the gateway after the deadline"
        receipt = send(url, time.monotonic() + 5, "in-time")
        assert receipt.code == 0  # type: ignore[attr-defined]  # send() returns the receipt or raises; here it is a Receipt
        assert httpx.get(f"{url}/_admin/stats").json()["sends"] == 1


def test_a_dropped_response_is_in_doubt_never_not_sent() -> None:
    with running_fake_gateway(p_drop_after_accept=1.0) as url:
        with pytest.raises(SendError) as err:
            send(url, None, "dropped")
        assert err.value.failure_class is FailureClass.IN_DOUBT
        assert httpx.get(f"{url}/_admin/stats").json()["sends"] == 1


def test_a_refused_connection_is_not_sent() -> None:
    with pytest.raises(SendError) as err:
        send("http://127.0.0.1:9", None, "nowhere")
    assert err.value.failure_class is FailureClass.NOT_SENT


def test_sends_refused_for_the_senders_own_lateness_do_not_open_the_tenants_breaker() -> None:
    from pydantic import SecretStr

    from pacer_common.domain.breaker import Breaker
    from pacer_common.domain.tenants import Tenant
    from pacer_common.tenant_gateways import TenantGateways

    with running_fake_gateway() as url:
        tenant = Tenant("default", url, SecretStr("cred"))

        async def go() -> tuple[list[str], bool, int]:
            gws = TenantGateways(lambda name: tenant, 2.0, DEFAULT_CODE_TABLE, breaker=lambda: Breaker(3, 60.0))
            late = []
            try:
                for n in range(6):
                    try:
                        await gws.send_text("g1", "r1", "hi", f"late-{n}", deadline=time.monotonic() - 0.001)
                    except SendError as err:
                        late.append(err.failure_class.value)
                receipt = await gws.send_text("g1", "r1", "hi", "in-time", deadline=time.monotonic() + 5)
                return late, gws.breaker("default").is_open, receipt.code
            finally:
                await gws.aclose()

        late, is_open, code = asyncio.run(go())
        assert late == [FailureClass.NOT_SENT.value] * 6
        assert not is_open, "a sender's own lateness is not a gateway failure"
        assert code == 0
        assert httpx.get(f"{url}/_admin/stats").json()["sends"] == 1


def test_idle_connections_are_dropped_before_a_usual_server_drops_them() -> None:
    import inspect

    import uvicorn

    from pacer_common.gateway import KEEPALIVE_S

    async def go() -> float:
        client = make_client("http://127.0.0.1:9", 2.0)
        try:
            return float(client.session().connector._keepalive_timeout or 0)
        finally:
            await client.aclose()

    server_idle_s = inspect.signature(uvicorn.Config.__init__).parameters["timeout_keep_alive"].default
    assert asyncio.run(go()) == KEEPALIVE_S < server_idle_s


_NO_FOUND = object()  # an answer whose data has no "found" at all


def _lookup_on_a_gateway_of_the_contract(found: object) -> tuple[bool | Hushed | None, list[dict[str, Any]]]:
    """The client's lookup of ("g1", "k1") against a gateway that serves only what the contract
    names, ``POST /message/lookup`` with a JSON body, and answers ``found``; with the
    requests it received."""
    seen: list[dict[str, Any]] = []
    app = FastAPI()

    @app.post("/message/lookup")
    async def lookup(request: Request) -> dict[str, Any]:
        seen.append({"body": await request.json(), "content_type": request.headers.get("content-type"),
                     "key": request.headers.get("x-idempotency-key"), "auth": request.headers.get("authorization")})
        return {"code": 0, "msg": "ok", "data": {} if found is _NO_FOUND else {"found": found}}

    async def go() -> bool | Hushed | None:
        port = free_port()
        server, task = await serving(app, port, "the stub gateway")
        client = make_client(f"http://127.0.0.1:{port}", 2.0, credential=SecretStr("cred"))
        try:
            return await GatewayClient(client, DEFAULT_CODE_TABLE).lookup("g1", "k1")
        finally:
            await client.aclose()
            server.should_exit = True
            await task

    return asyncio.run(go()), seen


def test_a_lookup_is_a_post_of_a_json_body_with_the_key_and_the_credential() -> None:
    found, seen = _lookup_on_a_gateway_of_the_contract(True)
    assert found is True
    assert seen == [{"body": {"guid": "g1", "idempotencyKey": "k1"}, "content_type": "application/json",
                     "key": "k1", "auth": "Bearer cred"}]
    assert _lookup_on_a_gateway_of_the_contract(False)[0] is False


@pytest.mark.parametrize("found", [None, 0, 1, "", "false", "true", [], {}, _NO_FOUND],
                         ids=["null", "0", "1", "empty", "string-false", "string-true", "list", "object", "absent"])
def test_a_found_that_is_not_a_json_boolean_is_cant_say(found: object) -> None:
    """Read as False, ``null`` or ``0`` would have a delivered item sent again; read as True,
    ``"false"`` would confirm a send that never happened."""
    assert _lookup_on_a_gateway_of_the_contract(found) == (None, [
        {"body": {"guid": "g1", "idempotencyKey": "k1"}, "content_type": "application/json", "key": "k1",
         "auth": "Bearer cred"}])


def test_a_credential_refused_by_http_401_is_not_sent_and_opens_the_tenants_breaker() -> None:
    """A rotated credential fails every call of the tenant with a bare 401: retried within the
    items' attempts and counted by the breaker, never a permanent bad_params failure."""
    from fastapi import Response

    from pacer_common.domain.breaker import Breaker
    from pacer_common.domain.tenants import Tenant
    from pacer_common.tenant_gateways import TenantGateways

    seen: list[str] = []
    app = FastAPI()

    @app.post("/message/sendText")
    async def send_text(request: Request) -> Response:
        seen.append(request.headers.get("x-idempotency-key", ""))
        return Response("Unauthorized", status_code=401)

    async def scenario(url: str) -> list[SendError]:
        tenant = Tenant("t", url, SecretStr("rotated"))
        gws = TenantGateways(lambda name: tenant, 2.0, DEFAULT_CODE_TABLE, breaker=lambda: Breaker(3, 60.0))
        errors = []
        try:
            for n in range(4):
                try:
                    await gws.send_text("g1", "r1", "hi", f"k{n}", tenant="t")
                except SendError as err:
                    errors.append(err)
        finally:
            await gws.aclose()
        return errors

    errors = on_stub(app, scenario)
    assert [(e.failure_class, e.code, e.deferred) for e in errors] == [(FailureClass.NOT_SENT, None, False)] * 3 + [
        (FailureClass.RATE_LIMITED, None, True)]
    assert errors[0].message.startswith("HTTP 401 from gateway: credential refused")
    assert seen == ["k0", "k1", "k2"], "the open breaker defers the fourth call without a request"


def test_a_call_that_never_got_a_connection_from_a_saturated_pool_is_not_sent() -> None:
    """aiohttp's ConnectionTimeoutError comes only from waiting for a connection (the pool, the
    TCP connect), before a byte is written: the request provably never left."""
    from fastapi.responses import StreamingResponse

    seen: list[str] = []
    arrived, release = asyncio.Event(), asyncio.Event()
    app = FastAPI()

    @app.post("/message/sendText")
    async def send_text(request: Request) -> StreamingResponse:
        seen.append(request.headers.get("x-idempotency-key", ""))
        arrived.set()

        async def trickle() -> Any:  # holds the one pooled connection, each read well inside its timeout
            for _ in range(300):
                yield b" "
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(release.wait(), 0.05)
                if release.is_set():
                    break
            yield b'{"code":0,"msg":"ok","data":{"msgId":"m"}}'

        return StreamingResponse(trickle(), media_type="application/json")

    async def scenario(url: str) -> tuple[object, SendError | None]:
        client = make_client(url, 1.0, max_connections=1)
        gw = GatewayClient(client, DEFAULT_CODE_TABLE)
        try:
            first = asyncio.ensure_future(gw.send_text("g1", "r1", "hi", "held"))
            # the first request holds the pool's one connection
            await asyncio.wait_for(arrived.wait(), 10)
            second: SendError | None = None
            try:
                await gw.send_text("g1", "r1", "hi", "waited")
            except SendError as err:
                second = err
            release.set()
            return await first, second
        finally:
            await client.aclose()

    first, second = on_stub(app, scenario)
    assert first.code == 0
    assert second is not None and second.failure_class is FailureClass.NOT_SENT, second
    assert "ConnectionTimeoutError" in second.message
    assert seen == ["held"], "the call left in want of a connection never reached the gateway"


def test_a_customer_read_left_without_an_answer_is_read_again_and_counted_by_the_breaker() -> None:
    """A read is harmless to repeat: a 5xx or an unreadable body is retryable, never in doubt
    (a lookup could only confirm a sync that wrote nothing); the breaker still counts it."""
    from fastapi import Response

    from pacer_common.domain.breaker import Breaker
    from pacer_common.domain.tenants import Tenant
    from pacer_common.tenant_gateways import TenantGateways

    answers = [Response("oops", status_code=502), Response("not json", status_code=200)]
    app = FastAPI()

    @app.post("/customer/detail")
    async def detail() -> Response:
        return answers.pop(0)

    async def scenario(url: str) -> tuple[list[SendError], bool]:
        tenant = Tenant("t", url, SecretStr("c"))
        gws = TenantGateways(lambda name: tenant, 2.0, DEFAULT_CODE_TABLE, breaker=lambda: Breaker(2, 60.0))
        errors = []
        try:
            for n in range(2):
                try:
                    await gws.customer_detail("g1", "c1", f"k{n}", tenant="t")
                except SendError as err:
                    errors.append(err)
            return errors, gws.breaker("t").is_open
        finally:
            await gws.aclose()

    errors, opened = on_stub(app, scenario)
    assert [e.failure_class for e in errors] == [FailureClass.RETRYABLE] * 2
    assert opened, "a gateway failing every read opens the tenant's breaker"
