"""The gateway client against the real fake-gateway server: what counts as sent, and when."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from pydantic import SecretStr

from pacer_common.domain.failures import DEFAULT_CODE_TABLE, FailureClass, SendError
from pacer_common.gateway import GatewayClient, make_client
from pacer_dev.fakegateway.process import free_port, running_fake_gateway
from tests.integration.helpers import serving


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


def _lookup_on_a_gateway_of_the_contract(found: object) -> tuple[bool | None, list[dict[str, Any]]]:
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

    async def go() -> bool | None:
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
