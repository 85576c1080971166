"""The fake gateway per tenant, and Pacer's clients of it: each tenant's credential is checked,
a failing tenant's gateway trips only that tenant's breaker, and callbacks reach the real
intake (and Kafka) signed with the tenant's secret, through duplicate, lost, late and
out-of-order faults."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from pacer_common.db.pool import open_pool
from pacer_common.db.tenants import TenantCache, add_usage
from pacer_common.domain.breaker import Breaker
from pacer_common.domain.failures import DEFAULT_CODE_TABLE, FailureClass, SendError
from pacer_common.domain.tenants import Tenant
from pacer_common.kafka import ensure_topics
from pacer_common.ops import Health, serve
from pacer_common.tenant_gateways import TenantGateways
from pacer_dev.fakegateway.process import free_port, running_fake_gateway
from pacer_intake.adapters.kafka import KafkaCallbackLog, callback_producer
from pacer_intake.app import build_app
from pacer_intake.core import Intake
from tests.integration.helpers import away_from_midnight, read_topic


def test_each_tenant_has_its_credential_and_a_failing_one_trips_only_its_own_breaker() -> None:
    with running_fake_gateway() as url:
        httpx.put(f"{url}/_admin/tenants/acme", json={"credential": "acme-cred"}).raise_for_status()
        httpx.put(f"{url}/_admin/tenants/globex", json={"credential": "globex-cred", "fail": True}).raise_for_status()
        body = {"guid": "g", "toId": "t", "content": "hi"}
        assert httpx.post(f"{url}/message/sendText", json=body).status_code == 401
        assert httpx.post(f"{url}/message/sendText", json=body,
                          headers={"Authorization": "Bearer wrong"}).status_code == 401
        tenants = {"acme": Tenant("acme", url, SecretStr("acme-cred")),
                   "globex": Tenant("globex", url, SecretStr("globex-cred"))}

        async def go() -> tuple[list[str], list[str]]:
            gws = TenantGateways(tenants.get, 2.0, DEFAULT_CODE_TABLE, breaker=lambda: Breaker(3, 60.0))
            acme, globex = [], []
            try:
                for n in range(6):
                    try:
                        await gws.send_text("g-glob", "t", "hi", f"gk{n}", tenant="globex")
                    except SendError as err:
                        globex.append(err.failure_class.value)
                    acme.append((await gws.send_text("g-acme", "t", "hi", f"ak{n}", tenant="acme")).msg_id or "")
                assert await gws.lookup("g-acme", "ak0", tenant="acme") is True
                assert await gws.lookup("g-glob", "gk0", tenant="globex") is None
            finally:
                await gws.aclose()
            return acme, globex

        acme, globex = asyncio.run(go())
        assert all(acme) and len(acme) == 6
        # Three 503s (in doubt) open globex's breaker; then it is refused at once, unsent.
        assert globex == ["in_doubt"] * 3 + [FailureClass.RATE_LIMITED.value] * 3
        stats = httpx.get(f"{url}/_admin/tenants").json()
        assert {t["name"]: t["has_credential"] for t in stats} == {"acme": True, "globex": True}
        assert "acme-cred" not in json.dumps(stats)
        # three sends and the lookup reached it; the three refused by the breaker did not
        assert httpx.get(f"{url}/_admin/callbacks").json()["counts"]["failed:globex"] == 4


@pytest.mark.parametrize("faults", [{"p_duplicate": 0.3, "p_lost": 0.2, "p_reorder": 0.3, "late_ms": 20,
                                     "late_jitter_ms": 30, "reorder_hold_ms": 200}])
def test_callbacks_reach_the_intake_signed_through_duplicates_losses_delays_and_reordering(
        database_url: str, kafka_config: dict[str, str], topic_prefix: str, faults: dict[str, Any]) -> None:
    topic = f"{topic_prefix}.callbacks"
    ensure_topics(kafka_config, {topic: (1, {}), f"{topic}.dlq": (1, {})})
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, callback_secret) VALUES ('acme', 'acme-cb')")
    n = 60

    async def go(gw: str) -> dict[str, Any]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        cache = TenantCache(pool, 60.0)
        await cache.reload()
        log = KafkaCallbackLog(callback_producer(kafka_config, 10.0), topic, f"{topic}.dlq", 10.0)
        port = free_port()
        server, task = await serve(build_app(Intake(cache.get, log), CollectorRegistry(), Health()), "127.0.0.1", port)
        try:
            async with httpx.AsyncClient(base_url=gw) as c:
                (await c.put("/_admin/tenants/acme", json={
                    "callback_secret": "acme-cb", "callback_url": f"http://127.0.0.1:{port}/callbacks/acme"})
                 ).raise_for_status()
                (await c.put("/_admin/callbacks", json=faults)).raise_for_status()
                (await c.post("/_admin/callbacks/emit", json={
                    "tenant": "acme", "cmd": "message.received", "guid": "g1", "data": {"fromId": "c", "content": "x"},
                    "count": n})).raise_for_status()
                deadline = time.monotonic() + 30
                while (view := (await c.get("/_admin/callbacks")).json())["in_flight"]:
                    assert time.monotonic() < deadline, view
                    await asyncio.sleep(0.05)
                return dict(view["counts"])
        finally:
            server.should_exit = True
            await task
            log.close()
            await pool.close()

    with running_fake_gateway(seed=7) as gw:
        counts = asyncio.run(go(gw))
    assert counts["emitted"] == n and min(counts["lost"], counts["duplicated"], counts["reordered"], counts["late"]) > 0
    assert counts["posted"] == n - counts["lost"] + counts["duplicated"]
    got = read_topic(kafka_config, topic, expect=counts["posted"])
    uids = [m["value"]["data"]["msgUid"] for m in got]
    assert len(uids) == counts["posted"] and {m["key"] for m in got} == {b"g1"}
    assert len(set(uids)) == n - counts["lost"]  # every callback not lost arrived, some twice
    assert sum(k - 1 for k in Counter(uids).values()) == counts["duplicated"]
    order = [int(u.removeprefix("m-")) for u in dict.fromkeys(uids)]
    assert order != sorted(order)  # some arrived out of order


def owed_faults(owed: dict[str, Any], cmds: tuple[str, ...]) -> dict[str, Any]:
    """Owe ``owed`` (after a refused negative count), emit ``cmds`` with no chance fault set,
    and answer the callbacks view once nothing is in flight."""
    with running_fake_gateway(seed=3) as gw, httpx.Client(base_url=gw) as c:
        c.put("/_admin/tenants/acme", json={"callback_secret": "s", "callback_url": f"{gw}/_nowhere"}).raise_for_status()
        for name in owed:
            assert c.put("/_admin/callbacks", json={name: {"media.ready": -1}}).status_code == 400
        view = c.put("/_admin/callbacks", json={**owed, "reorder_hold_ms": 50}).json()
        assert {name: view[name] for name in owed} == owed
        for cmd in cmds:
            c.post("/_admin/callbacks/emit", json={"tenant": "acme", "cmd": cmd, "guid": "g1", "data": {}}
                   ).raise_for_status()
        deadline = time.monotonic() + 10
        while (view := c.get("/_admin/callbacks").json())["in_flight"]:
            assert time.monotonic() < deadline, view
            time.sleep(0.02)
    return view


def test_lose_next_loses_exactly_that_many_callbacks_of_that_command_and_no_other() -> None:
    view = owed_faults({"lose_next": {"media.ready": 2}},
                       ("device.status", "media.ready", "media.ready", "media.ready", "device.status"))
    counts = view["counts"]
    assert (counts["emitted"], counts["lost"], counts["lost:media.ready"]) == (5, 2, 2)
    assert "lost:device.status" not in counts and counts["refused_404"] == 3
    assert view["lose_next"] == {}


def test_duplicate_next_and_reorder_next_fault_exactly_that_many_callbacks_of_that_command() -> None:
    view = owed_faults({"duplicate_next": {"device.status": 2}, "reorder_next": {"device.status": 2}},
                       ("media.ready", "device.status", "media.ready"))
    counts = view["counts"]
    # Only the owed faults happen, to the one device.status alone, and one of each stays owed.
    assert (counts["emitted"], counts["duplicated"], counts["reordered"]) == (3, 1, 1)
    assert counts["refused_404"] == 3 + 1
    assert (view["duplicate_next"], view["reorder_next"]) == ({"device.status": 1}, {"device.status": 1})


def test_a_tenant_past_its_daily_quota_is_deferred_across_senders_and_others_go_on(database_url: str) -> None:
    away_from_midnight("Asia/Shanghai")  # each flush counts on the database's today (the senders' default zone)
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO tenants (name, sends_per_day) VALUES ('small', 3), ('big', NULL)")
    with running_fake_gateway() as url:
        async def go() -> tuple[list[str], int, dict[str, int]]:
            pool = await open_pool(database_url, min_size=1, max_size=2)
            cache = TenantCache(pool, 60.0, fill=lambda t: Tenant(t.name, url, sends_per_day=t.sends_per_day))
            await cache.reload()
            one, two = (TenantGateways(cache.get, 2.0, DEFAULT_CODE_TABLE) for _ in range(2))  # two senders
            outcomes: list[str] = []
            try:
                for n, gws in enumerate([one, two, one, two, one]):
                    try:
                        await gws.send_text(f"s{n}", "t", "hi", f"small-{n}", tenant="small")
                        outcomes.append("sent")
                    except SendError as err:
                        outcomes.append(err.failure_class.value)
                    for each in (one, two):  # a round of each sender's usage loop
                        await add_usage(pool, each.usage)
                big = 0
                for n in range(5):
                    await two.send_text(f"b{n}", "t", "hi", f"big-{n}", tenant="big")
                    big += 1
                await add_usage(pool, two.usage)
                return outcomes, big, {t: n for t, (_, n) in two.usage.totals.items() if t != "default"}
            finally:
                await one.aclose()
                await two.aclose()
                await pool.close()

        outcomes, big, totals = asyncio.run(go())
        # the third send reaches the quota; the two senders see each other's sends in the totals
        assert outcomes == ["sent", "sent", "sent", "rate_limited", "rate_limited"]
        assert big == 5 and totals == {"small": 3, "big": 5}
        assert httpx.get(f"{url}/_admin/stats").json()["sends"] == 8


def test_each_tenant_counts_its_sends_on_its_own_calendar_day(database_url: str) -> None:
    """Kiritimati (UTC+14) and Pago Pago (UTC-11) are 25 hours apart: their dates always differ.
    A tenant naming no zone counts the sending process's (``pacer.timezone``). The senders take
    each tenant's day and its end from the database."""
    import time

    from pacer_common.domain.limits import local_day
    from pacer_common.domain.quota import DailyUsage

    away_from_midnight("Pacific/Kiritimati", "Pacific/Pago_Pago")  # each flush counts on the database's today
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (name, sends_per_day, timezone) VALUES ('east', 5, 'Pacific/Kiritimati'),"
                     " ('west', 5, 'Pacific/Pago_Pago'), ('plain', 5, NULL)")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="not one this database knows"):
            conn.execute("UPDATE tenants SET timezone = 'UTC+8' WHERE name = 'plain'")

    async def go(zone: str) -> dict[str, Any]:
        usage = DailyUsage()
        for tenant in ("east", "west", "plain", "east"):
            usage.count(tenant)
        pool = await open_pool(database_url, min_size=1, max_size=1, options=f"-c pacer.timezone={zone}")
        try:
            await add_usage(pool, usage)
        finally:
            await pool.close()
        return usage.totals

    east_day, _, east_end = local_day("Pacific/Kiritimati", time.time())
    west_day, _, west_end = local_day("Pacific/Pago_Pago", time.time())
    assert asyncio.run(go("Pacific/Pago_Pago")) == {
        "default": (west_end, 0), "east": (east_end, 2), "west": (west_end, 1), "plain": (west_end, 1)}
    with psycopg.connect(database_url) as conn:
        stored = conn.execute("SELECT tenant, day, sends FROM tenant_usage ORDER BY tenant").fetchall()
    assert stored == [("east", east_day, 2), ("plain", west_day, 1), ("west", west_day, 1)]
    # another sender, in another zone: its "plain" day is not the first one's
    assert asyncio.run(go("Pacific/Kiritimati")) == {
        "default": (east_end, 0), "east": (east_end, 4), "west": (west_end, 2), "plain": (east_end, 1)}
