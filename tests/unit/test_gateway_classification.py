"""How the gateway client classifies what it cannot read as an answer, and which refusals are
Pacer's own (no request made), without a server: the classification functions themselves."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from pydantic import SecretStr

from pacer_common.domain.breaker import Breaker
from pacer_common.domain.failures import DEFAULT_CODE_TABLE, FailureClass, SendError
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.tenants import Tenant
from pacer_common.gateway import GatewayClient, _provably_not_sent, make_client
from pacer_common.tenant_gateways import TenantGateways

F = FailureClass


def refused(status: int, body: object = b"") -> SendError:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return GatewayClient(make_client("http://127.0.0.1:9", 1.0), DEFAULT_CODE_TABLE)._refused(status, raw)


@pytest.mark.parametrize(("status", "why"), [(401, "credential refused"), (403, "forbidden"), (404, "no such route"),
                                             (405, "method not allowed"), (408, "request timed out")])
def test_a_4xx_without_a_gateway_code_refused_before_anything_acted_is_not_sent(status: int, why: str) -> None:
    err = refused(status, b"<html>Unauthorized</html>")
    assert (err.failure_class, err.code) == (F.NOT_SENT, None)
    assert err.message.startswith(f"HTTP {status} from gateway: {why}")


@pytest.mark.parametrize("status", [409, 410, 412, 425])
def test_another_4xx_without_a_gateway_code_is_in_doubt(status: int) -> None:
    # A 409 is what an idempotency layer answers for a key still being processed: the first
    # request may be under way, and a resend could deliver it twice.
    err = refused(status, b"Conflict")
    assert (err.failure_class, err.code) == (F.IN_DOUBT, None)


@pytest.mark.parametrize("status", [400, 413, 415, 422])
def test_a_4xx_saying_the_request_is_wrong_is_bad_params(status: int) -> None:
    assert refused(status, b"bad").failure_class is F.BAD_PARAMS


def test_a_4xx_carrying_a_gateway_code_of_the_table_is_classified_by_that_code() -> None:
    err = refused(401, {"code": 1003, "msg": "unauthorized device"})
    assert (err.failure_class, err.code, err.message) == (F.NEEDS_HUMAN, 1003, "unauthorized device")
    assert refused(403, {"code": 45009, "msg": "slow down"}).failure_class is F.RATE_LIMITED
    assert refused(400, {"code": -1, "msg": "busy"}).failure_class is F.RETRYABLE


def test_a_4xx_carrying_another_code_is_the_gateways_answer_about_the_request() -> None:
    # Read as a 200 answer's code would be: retried within the item's attempts, the code kept,
    # so the tenant's breaker does not count it as the gateway failing.
    err = refused(403, {"code": 2001, "msg": "not in room"})
    assert (err.failure_class, err.code) == (F.RETRYABLE, 2001) and "not in room" in err.message
    assert refused(422, {"code": 777, "msg": "?"}).failure_class is F.BAD_PARAMS
    # A 401 is the tenant's credential refused, whatever code the body carries.
    err = refused(401, {"code": 401, "msg": "bad token"})
    assert (err.failure_class, err.code) == (F.NOT_SENT, None) and "credential refused" in err.message


def test_a_connection_timeout_is_not_sent_and_a_read_timeout_in_doubt() -> None:
    assert _provably_not_sent(aiohttp.ConnectionTimeoutError("Connection timeout to host http://gw"))
    assert not _provably_not_sent(aiohttp.SocketTimeoutError("Timeout on reading data from socket"))
    assert not _provably_not_sent(aiohttp.ServerTimeoutError("timeout"))
    assert not _provably_not_sent(aiohttp.ServerDisconnectedError())


def test_pacers_own_deferrals_say_no_request_was_made() -> None:
    tenant = Tenant("t", "http://127.0.0.1:9", SecretStr("c"), sends_per_day=0)
    known: dict[str, Tenant] = {"t": tenant}

    async def deferrals() -> list[SendError]:
        gws = TenantGateways(known.get, 1.0, DEFAULT_CODE_TABLE, breaker=lambda: Breaker(1, 60.0))
        found = []
        try:
            for call in (lambda: gws.send_text("g", "c", "hi", "k1", tenant="nobody"),  # not known here yet
                         lambda: gws.send_text("g", "c", "hi", "k2", tenant="t")):  # over its quota of 0
                try:
                    await call()
                except SendError as err:
                    found.append(err)
            gws.breaker("t").record(True, gws.clock())  # its gateway failing: the breaker opens
            try:
                await gws.customer_detail("g", "c", "k3", tenant="t")
            except SendError as err:
                found.append(err)
        finally:
            await gws.aclose()
        return found

    errors = asyncio.run(deferrals())
    assert [(e.failure_class, e.deferred, e.gateway_rate_limit) for e in errors] == [(F.RATE_LIMITED, True, False)] * 3
    assert not SendError(F.RATE_LIMITED, None, "HTTP 429 from gateway").deferred


def test_a_receipt_is_stored_without_nul_or_lone_surrogates() -> None:
    payload = Receipt(0, "ok\x00 \ud800done", "id\x00\udfff", 1.0).as_payload()
    assert payload["msg"] == "ok \ufffddone" and payload["msg_id"] == "id\ufffd"
    json.dumps(payload, ensure_ascii=False).encode()  # UTF-8 can hold it (a lone surrogate cannot be encoded)
    assert Receipt(0, "ok", 123, 1.0).as_payload()["msg_id"] == 123  # type: ignore[arg-type]  # a gateway's numeric msgId, kept as given
