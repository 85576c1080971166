"""The fake gateway's actions beyond sendText over real HTTP: media, customers, devices."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest

from pacer_common.domain.failures import DEFAULT_CODE_TABLE
from pacer_common.gateway import GatewayClient, make_client

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def c(server_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url, timeout=10.0) as client:
        client.put("/_admin/actions", json={"media_ready_after_ms": 0}).raise_for_status()
        yield client


def test_an_upload_repeated_with_its_key_is_the_same_media_and_a_send_needs_it_ready(c: httpx.Client) -> None:
    g = f"g-{uuid.uuid4().hex[:6]}"
    c.put("/_admin/actions", json={"media_ready_after_ms": 3_600_000}).raise_for_status()
    before = c.get("/_admin/actions").json()
    body = {"guid": g, "url": "https://cdn.example/a.png", "kind": "image"}
    first = c.post("/media/upload", json=body, headers={"X-Idempotency-Key": f"media:{g}:1"}).json()
    again = c.post("/media/upload", json=body, headers={"X-Idempotency-Key": f"media:{g}:1"}).json()
    assert first["code"] == 0 and first["data"] == again["data"] == {"mediaId": first["data"]["mediaId"],
                                                                      "status": "pending"}
    mid = first["data"]["mediaId"]
    early = c.post("/message/sendImage", json={"guid": g, "toId": "r1", "mediaId": mid}).json()
    assert early["code"] == 40001 and "not ready" in early["msg"]
    c.put(f"/_admin/media/{mid}", json={"status": "ready"}).raise_for_status()
    assert c.post("/media/status", json={"guid": g, "mediaId": mid}).json()["data"]["status"] == "ready"
    sent = c.post("/message/sendImage", json={"guid": g, "toId": "r1", "mediaId": mid},
                  headers={"X-Idempotency-Key": "k1"}).json()
    assert sent["code"] == 0 and sent["data"]["msgId"]
    wrong_kind = c.post("/message/sendVideo", json={"guid": g, "toId": "r1", "mediaId": mid}).json()
    assert wrong_kind["code"] == 40001
    after = c.get("/_admin/actions").json()
    assert (after["uploads"] - before["uploads"], after["sends_unready"] - before["sends_unready"]) == (1, 2)
    assert [s["content"] for s in c.get(f"/_admin/sends?guid={g}").json()["sends"]] == [f"image:{mid}"]


def test_tags_change_the_customer_once_and_detail_reads_its_version(c: httpx.Client) -> None:
    g, cid = f"g-{uuid.uuid4().hex[:6]}", f"c-{uuid.uuid4().hex[:6]}"
    c.put(f"/_admin/customers/{cid}", json={"name": "Ann", "tags": [], "version": 4}).raise_for_status()
    for path, tags in (("add", ["a", "b"]), ("add", ["a"]), ("remove", ["b", "zz"])):
        r = c.post(f"/customer/tags/{path}", json={"guid": g, "customerId": cid, "tagIds": tags}).json()
        assert r["code"] == 0
    d = c.post("/customer/detail", json={"guid": g, "customerId": cid}).json()
    assert d["data"]["customer"] == {"customerId": cid, "name": "Ann", "remark": "", "tags": ["a"], "version": 6}
    assert c.post("/customer/tags/add", json={"guid": g, "customerId": cid, "tagIds": []}).json()["code"] == 40001


def test_a_device_that_is_not_online_has_its_sends_refused_with_its_code(c: httpx.Client) -> None:
    g = f"g-{uuid.uuid4().hex[:6]}"
    c.put(f"/_admin/devices/{g}", json={"status": "kicked"}).raise_for_status()
    assert c.post("/message/sendText", json={"guid": g, "toId": "r", "content": "x"}).json()["code"] == 1002
    assert c.post("/media/upload", json={"guid": g, "url": "https://x.example/a", "kind": "file"}).json()["code"] \
        == 1002
    c.put(f"/_admin/devices/{g}", json={"status": "online"}).raise_for_status()
    assert c.post("/message/sendText", json={"guid": g, "toId": "r", "content": "x"}).json()["code"] == 0
    assert c.put(f"/_admin/devices/{g}", json={"status": "asleep"}).status_code == 400


def test_the_client_reads_every_answer(server_url: str, c: httpx.Client) -> None:
    g, cid = f"g-{uuid.uuid4().hex[:6]}", f"c-{uuid.uuid4().hex[:6]}"
    c.put(f"/_admin/customers/{cid}", json={"name": "Bo", "version": 2}).raise_for_status()

    async def go() -> tuple[str, str, str | None, int]:
        http = make_client(server_url, 5.0)
        try:
            gw = GatewayClient(http, DEFAULT_CODE_TABLE)
            up = await gw.upload_media(g, "https://cdn.example/fail-upload.png", "image", "x.png", "k-up")
            status = await gw.media_status(g, up.media_id)
            tags = await gw.customer_tags("add", g, cid, ["t"], "k-tags")
            _, customer = await gw.customer_detail(g, cid, "k-detail")
            return up.status, status.status, tags.msg_id, customer.version
        finally:
            await http.aclose()

    up, status, msg_id, version = asyncio.run(go())
    assert (up, status, version) == ("failed", "failed", 3) and msg_id
