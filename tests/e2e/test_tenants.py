"""Tenants end to end, as processes: one tenant's gateway failing entirely leaves another's job
to complete, every item confirmed once; a token scoped to a tenant is refused another tenant's
job; the fake gateway's callbacks reach the callback topic through the intake."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import psycopg

from pacer_common.db.operations import create_token
from pacer_common.domain.tokens import Role
from pacer_dev.stack import Stack
from tests.e2e.conftest import gateway
from tests.e2e.helpers import job_state, publish, request, sends_for
from tests.integration.helpers import read_topic, wait_for


def admin_token(stack: Stack) -> str:
    async def make() -> str:
        async with await psycopg.AsyncConnection.connect(stack.infra.database_url, autocommit=True) as conn:
            return (await create_token(conn, "tenants-e2e-admin", Role.ADMIN, "test")).token

    return asyncio.run(make())


def test_one_tenants_failing_gateway_leaves_the_others_job_to_complete_and_scoped_tokens_stay_in_theirs(
        stack: Stack) -> None:
    control = stack.procs.get("control") or stack.start_service("control")
    api = httpx.Client(base_url=f"{control.url}/api/v1", headers={"Authorization": f"Bearer {admin_token(stack)}"})
    for name, fail in (("acme", False), ("globex", True)):
        gateway(stack, f"/_admin/tenants/{name}", "PUT", {"credential": f"{name}-cred", "fail": fail})
        made = api.post("/tenants", json={"name": name, "base_url": stack.gateway_url, "credential": f"{name}-cred"})
        assert made.status_code == 201, made.text
    jobs: dict[str, dict[str, Any]] = {}
    for name in ("acme", "globex"):
        jobs[name] = {**request(40, 4, f"{name}-{stack.topic_prefix}"), "tenant": name}
    publish(stack, *(json.dumps(j).encode() for j in jobs.values()))
    acme, globex = (str(jobs[n]["request_id"]) for n in ("acme", "globex"))

    state = wait_for(lambda: (s := job_state(stack, acme)) and s[0] == "completed" and s, 120, "acme's job")
    assert state[1] == {"confirmed": 40}
    sent = sends_for(stack, acme)
    assert len(sent) == 40 and len({s["idempotencyKey"] for s in sent}) == 40, "each acme item delivered once"
    with psycopg.connect(stack.infra.database_url) as conn:
        receipts = conn.execute("SELECT count(*) FROM send_ledger l JOIN items i USING (item_id) JOIN jobs j"
                                " USING (job_id) WHERE j.request_id = %s AND l.state = 'sent'", (globex,)).fetchone()
    assert receipts == (0,), "globex's failing gateway confirmed no send to Pacer"
    globex_state = job_state(stack, globex)
    assert globex_state is not None and "confirmed" not in globex_state[1]
    refused = gateway(stack, "/_admin/callbacks")["counts"].get("failed:globex", 0)
    assert refused > 0, "globex's sends reached its failing gateway"

    token = api.post("/tokens", json={"name": "acme-operator", "role": "operator", "tenants": ["acme"]}).json()["token"]
    scoped = httpx.Client(base_url=f"{control.url}/api/v1", headers={"Authorization": f"Bearer {token}"})
    with psycopg.connect(stack.infra.database_url) as conn:
        ids: dict[str, str] = dict(conn.execute("SELECT tenant, job_id::text FROM jobs WHERE request_id = ANY(%s)",
                                ([acme, globex],)).fetchall())
    assert scoped.get(f"/jobs/{ids['acme']}").status_code == 200
    for r in (scoped.get(f"/jobs/{ids['globex']}"), scoped.post(f"/jobs/{ids['globex']}/cancel", json={"reason": "x"})):
        assert r.status_code == 404 and "tenant(s) acme" in r.json()["detail"]
    assert [j["request_id"] for j in scoped.get("/jobs").json()["jobs"]] == [acme]


def test_the_gateways_callbacks_reach_the_callback_topic_through_the_intake(stack: Stack) -> None:
    if "intake" not in stack.procs:
        stack.start_intake()
    gateway(stack, "/_admin/callbacks/emit", "POST", {"tenant": "default", "cmd": "device.status", "guid": "g-cb",
                                                      "data": {"status": "kicked"}})
    got = read_topic({"bootstrap.servers": stack.infra.kafka_bootstrap}, f"{stack.topic_prefix}.callbacks", expect=1)
    assert [(m["key"], m["headers"]["pacer-tenant"], m["value"]["data"]) for m in got] == [
        (b"g-cb", b"default", {"status": "kicked"})]
