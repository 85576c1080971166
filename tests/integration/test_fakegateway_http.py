"""The fake gateway over real HTTP, run as a subprocess on a free loopback port."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import httpx_aiohttp
import pytest

from pacer_dev.fakegateway.config import GatewayConfig
from pacer_dev.fakegateway.process import start_fake_gateway, stop
from pacer_dev.fakegateway.state import NEEDS_HUMAN_CODES
from pacer_dev.infra.process import wait_for

pytestmark = pytest.mark.timeout(120)

SEND = "/message/sendText"
LOOKUP = "/message/lookup"


@pytest.fixture()
def client(server_url: str) -> Iterator[httpx.Client]:
    """A client against a gateway with default knobs and no records."""
    with httpx.Client(base_url=server_url, timeout=10.0) as c:
        c.put("/_admin/config", json=GatewayConfig().to_dict()).raise_for_status()
        c.post("/_admin/reset").raise_for_status()
        yield c


def send(c: httpx.Client, guid: str, to_id: str, content: str, key: str | None = None) -> httpx.Response:
    headers = {"X-Idempotency-Key": key} if key else {}
    return c.post(SEND, json={"guid": guid, "toId": to_id, "content": content}, headers=headers)


def knobs(c: httpx.Client, **changes: Any) -> None:
    c.put("/_admin/config", json=changes).raise_for_status()


def stats(c: httpx.Client) -> dict[str, Any]:
    return c.get("/_admin/stats").json()


def test_healthz(client: httpx.Client) -> None:
    assert client.get("/healthz").json()["status"] == "ok"


def test_accepted_send_is_recorded(client: httpx.Client) -> None:
    resp = send(client, "g1", "u1", "hello", key="k1")
    assert resp.status_code == 200
    doc = resp.json()
    assert doc["code"] == 0
    assert doc["data"]["guid"] == "g1" and doc["data"]["toId"] == "u1"
    listing = client.get("/_admin/sends", params={"guid": "g1"}).json()
    assert listing["total"] == 1
    rec = listing["sends"][0]
    assert rec["msgId"] == doc["data"]["msgId"]
    assert (rec["content"], rec["idempotencyKey"]) == ("hello", "k1")
    assert rec["at"] > 0 and rec["at_mono"] > 0
    assert stats(client)["sends"] == 1


@pytest.mark.parametrize(
    ("knob", "expected_codes"),
    [
        ("p_retryable", {-1}),
        ("p_needs_human", set(NEEDS_HUMAN_CODES)),
        ("p_bad_params", {40001}),
        ("p_rate_limited", {45009}),
    ],
)
def test_failure_classes_answer_their_codes_without_delivering(
    client: httpx.Client, knob: str, expected_codes: set[int]
) -> None:
    knobs(client, **{knob: 1.0})
    codes = set()
    for i in range(5):
        resp = send(client, "g1", "u1", f"m{i}", key=f"k{i}")
        assert resp.status_code == 200
        codes.add(resp.json()["code"])
    assert codes and codes <= expected_codes
    s = stats(client)
    assert s["sends"] == 0
    assert sum(s["rejected_by_code"].values()) == 5
    assert set(s["rejected_by_code"]) <= {str(c) for c in expected_codes}


def test_http_5xx_answers_502_without_delivering(client: httpx.Client) -> None:
    knobs(client, p_http_5xx=1.0)
    assert send(client, "g1", "u1", "x", key="k").status_code == 502
    s = stats(client)
    assert (s["sends"], s["http_5xx"]) == (0, 1)


def test_fail_guids_and_malformed_bodies(client: httpx.Client) -> None:
    knobs(client, fail_guids={"kicked": 1002})
    assert send(client, "kicked", "u1", "x").json()["code"] == 1002
    assert send(client, "fine", "u1", "x").json()["code"] == 0
    assert client.post(SEND, json={"guid": "g1"}).json()["code"] == 40001
    assert client.post(SEND, content=b"not json").json()["code"] == 40001
    assert stats(client)["rejected_by_code"] == {"1002": 1, "40001": 2}


def test_drop_after_accept_is_a_transport_error_but_delivered(client: httpx.Client) -> None:
    knobs(client, p_drop_after_accept=1.0)
    with pytest.raises(httpx.TransportError):
        send(client, "g1", "u1", "in doubt", key="k-drop")
    knobs(client, p_drop_after_accept=0.0)
    s = stats(client)
    assert (s["sends"], s["dropped_responses"]) == (1, 1)
    by_key = client.post(LOOKUP, json={"guid": "g1", "idempotencyKey": "k-drop"}).json()
    assert by_key["code"] == 0 and by_key["data"]["found"] is True
    assert len(by_key["data"]["sends"]) == 1
    by_text = client.post(LOOKUP, json={"guid": "g1", "toId": "u1", "content": "in doubt"})
    assert by_text.json()["data"]["found"] is True
    other = client.post(LOOKUP, json={"guid": "g2", "idempotencyKey": "k-drop"}).json()
    assert other["data"] == {"found": False, "sends": []}
    # The server survives the dropped connection and keeps serving.
    assert send(client, "g1", "u1", "after", key="k-after").json()["code"] == 0


def test_drop_through_aiohttp_transport_surfaces_as_connect_timeout(server_url: str, client: httpx.Client) -> None:
    """httpx_aiohttp maps "server disconnected" to ConnectTimeout although the request was sent.

    Pinned here because a sender must not read ConnectTimeout as "never reached
    the gateway" when it uses this transport.
    """
    knobs(client, p_drop_after_accept=1.0)

    async def attempt() -> BaseException | None:
        transport = httpx_aiohttp.AiohttpTransport()
        async with httpx.AsyncClient(base_url=server_url, transport=transport, timeout=10.0) as ac:
            try:
                await ac.post(SEND, json={"guid": "g1", "toId": "u1", "content": "x"})
            except httpx.TransportError as exc:
                return exc
        return None

    exc = asyncio.run(attempt())
    assert isinstance(exc, httpx.TransportError)
    assert isinstance(exc, httpx.ConnectTimeout)
    assert stats(client)["sends"] == 1


def test_lookup_unavailable_answers_503(client: httpx.Client) -> None:
    knobs(client, lookup_unavailable=True)
    resp = client.post(LOOKUP, json={"guid": "g1", "idempotencyKey": "k"})
    assert resp.status_code == 503
    knobs(client, lookup_unavailable=False)
    assert client.post(LOOKUP, json={"guid": "g1"}).json()["code"] == 40001


def test_lookup_is_a_post_with_a_json_body_as_the_contract_says(client: httpx.Client) -> None:
    assert client.get(LOOKUP, params={"guid": "g1", "idempotencyKey": "k"}).status_code == 405
    assert client.post(LOOKUP, content=b"not json").json()["code"] == 40001
    assert client.post(LOOKUP, json=["g1", "k"]).json()["code"] == 40001
    assert client.post(LOOKUP, json={"guid": "g1", "idempotencyKey": 7}).json()["code"] == 40001
    assert client.post(LOOKUP, json={"guid": "g1", "idempotencyKey": "k"}).json()["data"]["found"] is False


def test_lookup_delay_holds_the_answer_back(client: httpx.Client) -> None:
    knobs(client, lookup_delay_ms=60_000)
    with pytest.raises(httpx.ReadTimeout):
        client.post(LOOKUP, json={"guid": "g1", "idempotencyKey": "k"}, timeout=0.3)
    assert stats(client)["lookups_delayed"] == 1
    knobs(client, lookup_delay_ms=0)
    assert client.post(LOOKUP, json={"guid": "g1", "idempotencyKey": "k"}).json()["code"] == 0


def test_min_interval_violation_is_rejected_and_counted(client: httpx.Client) -> None:
    knobs(client, min_interval_ms=60_000, guid_min_interval_ms={"unpaced": 0})
    assert send(client, "g1", "u1", "first", key="k1").json()["code"] == 0
    assert send(client, "g1", "u1", "too soon", key="k2").json()["code"] == 45009
    assert send(client, "unpaced", "u1", "a").json()["code"] == 0
    assert send(client, "unpaced", "u1", "b").json()["code"] == 0
    s = stats(client)
    assert (s["sends"], s["interval_violations"], s["rejected_by_code"]) == (3, 1, {"45009": 1})
    knobs(client, min_interval_ms=0)
    assert send(client, "g1", "u1", "too soon", key="k2").json()["code"] == 0


def test_stats_count_duplicates_by_key_and_by_triple(client: httpx.Client) -> None:
    for _ in range(2):
        assert send(client, "g1", "u1", "keyed", key="k1").json()["code"] == 0
        assert send(client, "g1", "u2", "keyless").json()["code"] == 0
    assert send(client, "g1", "u3", "unique", key="k2").json()["code"] == 0
    s = stats(client)
    assert s["sends"] == 5 and s["unique_keys"] == 2
    assert (s["duplicate_keys"], s["duplicate_triples"], s["duplicates"]) == (1, 1, 2)
    assert s["duplicate_triples_all"] == 2
    detail = client.get("/_admin/stats", params={"detail": 1}).json()
    assert detail["by_guid_count"] == {"g1": 5}
    assert "by_guid_count" not in s


def test_concurrent_requests_for_one_guid_are_detected(server_url: str, client: httpx.Client) -> None:
    knobs(client, latency_ms=800)

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=server_url, timeout=10.0) as ac:
            payloads = [{"guid": "g1", "toId": f"u{i}", "content": "x"} for i in range(3)]
            resps = await asyncio.gather(*(ac.post(SEND, json=p) for p in payloads))
            return [r.json()["code"] for r in resps]

    assert asyncio.run(burst()) == [0, 0, 0]
    assert stats(client)["max_concurrency_per_guid"] == 3


def test_sequential_requests_keep_concurrency_at_one(client: httpx.Client) -> None:
    for i in range(3):
        assert send(client, "g1", "u1", f"m{i}").json()["code"] == 0
    assert stats(client)["max_concurrency_per_guid"] == 1


def test_sends_listing_pages_and_reset_keeps_config(client: httpx.Client) -> None:
    knobs(client, latency_jitter_ms=1)
    for i in range(5):
        send(client, "g1", "u1", f"m{i}")
    page = client.get("/_admin/sends", params={"guid": "g1", "limit": 2, "offset": 1}).json()
    assert page["total"] == 5
    assert [r["content"] for r in page["sends"]] == ["m1", "m2"]
    gaps = [b["at_mono"] - a["at_mono"] for a, b in zip(page["sends"], page["sends"][1:], strict=False)]
    assert all(g >= 0 for g in gaps)
    client.post("/_admin/reset").raise_for_status()
    assert stats(client)["sends"] == 0
    assert client.get("/_admin/config").json()["latency_jitter_ms"] == 1


def test_runtime_config_rejects_bad_values(client: httpx.Client) -> None:
    assert client.put("/_admin/config", json={"p_retryable": 2}).status_code == 400
    assert client.put("/_admin/config", json={"bogus": 1}).status_code == 400
    assert client.put("/_admin/config", json=[1]).status_code == 400
    assert client.get("/_admin/config").json()["p_retryable"] == 0


def test_knobs_given_at_start_are_applied() -> None:
    url, proc = start_fake_gateway(fail_guids={"gone": 1001}, min_interval_ms=5, seed=7)
    try:
        with httpx.Client(base_url=url, timeout=10.0) as c:
            cfg = c.get("/_admin/config").json()
            assert (cfg["fail_guids"], cfg["min_interval_ms"], cfg["seed"]) == ({"gone": 1001}, 5, 7)
            assert send(c, "gone", "u", "x").json()["code"] == 1001
    finally:
        assert stop(proc) is not None
    assert proc.poll() is not None


def test_audiences_are_defined_paged_and_faulted_over_http(client: httpx.Client) -> None:
    targets = [{"guid": "g", "to_id": f"r{i}"} for i in range(3)]
    assert client.put("/_admin/audiences/a1", json={"targets": targets, "page_size_cap": 2}).status_code == 200
    first = client.get("/_audience/a1", params={"limit": 10}).json()
    assert first == {"items": targets[:2], "next_cursor": "off:2"}
    assert client.get("/_audience/a1", params={"cursor": "off:2", "limit": 10}).json() == {
        "items": targets[2:], "next_cursor": None}
    assert client.put("/_admin/audiences/a1/faults", json={"fail_next": 1, "status": 503}).status_code == 200
    assert client.get("/_audience/a1").status_code == 503
    assert client.get("/_audience/a1", params={"cursor": "nope"}).status_code == 400
    log = client.get("/_admin/audiences/a1").json()["requests"]
    assert [(r["cursor"], r["status"]) for r in log] == [(None, 200), ("off:2", 200), (None, 503), ("nope", 400)]
    assert client.get("/_audience/missing").status_code == 404
    assert client.put("/_admin/audiences/missing/faults", json={"fail_next": 1}).status_code == 404
    assert client.put("/_admin/audiences/a2", json={"targets": "x"}).status_code == 400
    assert client.put("/_admin/audiences/a2", content=b"{").status_code == 400
    assert client.delete("/_admin/audiences/a1").json() == {"deleted": True}


def test_a_held_page_request_is_answered_only_once_released(server_url: str, client: httpx.Client) -> None:
    targets = [{"guid": "g", "to_id": f"r{i}"} for i in range(3)]
    client.put("/_admin/audiences/h1", json={"targets": targets})
    assert client.put("/_admin/audiences/h1/hold", json={"hold_next": 1}).json()["hold_next"] == 1
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(lambda: httpx.get(f"{server_url}/_audience/h1", params={"limit": 2}, timeout=10.0))
        assert wait_for(lambda: client.get("/_admin/audiences/h1").json()["held"] == 1, timeout=10)
        # The next request is not held, and the held one is still waiting.
        assert client.get("/_audience/h1", params={"limit": 2}).json()["next_cursor"] == "off:2"
        assert not held.done()
        assert client.post("/_admin/audiences/h1/release").status_code == 200
        assert held.result(timeout=10).json() == {"items": targets[:2], "next_cursor": "off:2"}
    assert client.get("/_admin/audiences/h1").json()["held"] == 0
    assert client.put("/_admin/audiences/h1/hold", json={"hold_next": -1}).status_code == 400
    assert client.put("/_admin/audiences/nope/hold", json={}).status_code == 404
    assert client.post("/_admin/audiences/nope/release").status_code == 404
