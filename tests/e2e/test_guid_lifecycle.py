"""A guid kicked mid-campaign: its queue is held (nothing sent, at any depth), the state
gauge shows it, and it resumes by itself when a ``device.status: online`` callback comes —
with zero duplicates. Callbacks are published straight to ``<prefix>.callbacks``, as the
intake appends them."""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta

import psycopg

from pacer_common.kafka import make_producer, produce_all
from pacer_dev.stack import Stack
from tests.e2e.conftest import gateway
from tests.e2e.helpers import job_state, publish, request, sends_for
from tests.integration.helpers import wait_for


def callback(stack: Stack, guid: str, status: str, ts: datetime) -> None:
    body = {"cmd": "device.status", "guid": guid, "ts": ts.isoformat(), "data": {"status": status}}
    produce_all(make_producer({"bootstrap.servers": stack.infra.kafka_bootstrap}),
                [(f"{stack.topic_prefix}.callbacks", guid.encode(), json.dumps(body).encode(),
                  [("pacer-tenant", b"default")])])


def guids_in(stack: Stack, state: str) -> float | None:
    """``pacer_reconciler_guids_by_state{state}`` as the reconciler exports it (None: not yet)."""
    with urllib.request.urlopen(f"{stack.procs['reconciler'].url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    m = re.search(rf'^pacer_reconciler_guids_by_state{{state="{state}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


def kicked_refusals(stack: Stack) -> int:
    """How many sends the gateway refused with 1002 (kicked): only this test's guid is failed so."""
    return int(gateway(stack, "/_admin/stats")["rejected_by_code"].get("1002", 0))


def db(stack: Stack, sql: str, *args: object) -> list[tuple]:
    with psycopg.connect(stack.infra.database_url) as conn:
        return conn.execute(sql, args).fetchall()


def test_a_guid_kicked_mid_campaign_is_held_and_resumes_on_online_without_duplicates(stack: Stack) -> None:
    guid = f"kick-{uuid.uuid4().hex[:6]}"
    db(stack, "INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 'test') RETURNING guid",
       guid, json.dumps({"min_interval_s": 0.1, "jitter_s": 0.0}))
    campaign = request(40, 1)
    campaign["targets"]["items"] = [
        {"guid": guid, "to_id": f"room-{i}", "vars": {"n": str(i), "rid": "k"}} for i in range(40)]
    publish(stack, json.dumps(campaign).encode())
    wait_for(lambda: len(sends_for(stack, guid)) >= 5, 60, "the campaign to start")

    # The account is kicked: the gateway refuses its sends with 1002, the sender learns it.
    gateway(stack, "/_admin/config", "PUT", {"fail_guids": {guid: 1002}})
    state, source = wait_for(lambda: next(iter(db(
        stack, "SELECT state::text, source FROM guid_states WHERE guid = %s", guid)), None), 30, "kicked")
    assert (state, source) == ("kicked", "send_failure")
    # The gateway refuses the guid's sends before recording them: count its refusals instead.
    refused_when_kicked = kicked_refusals(stack)
    # A duplicate of the news by callback changes nothing; the alert gauge shows the guid.
    callback(stack, guid, "kicked", datetime.now(UTC))
    wait_for(lambda: (guids_in(stack, "kicked") or 0) >= 1, 30, "the kicked gauge")

    # More work for the held guid: its doorbells ring, and the sender claims none of it.
    extra = request(3, 1)
    extra["targets"]["items"] = [
        {"guid": guid, "to_id": f"extra-{i}", "vars": {"n": str(i), "rid": "x"}} for i in range(3)]
    publish(stack, json.dumps(extra).encode())
    wait_for(lambda: db(stack, "SELECT count(*) FROM items i JOIN jobs j USING (job_id) WHERE j.request_id = %s "
                               "AND i.held AND i.status = 'pending'", extra["request_id"])[0][0] == 3,
             60, "the extra job's items to be refused (held) by the sender")
    tried_while_kicked = kicked_refusals(stack) - refused_when_kicked
    assert tried_while_kicked <= 1, f"{tried_while_kicked} sends of the kicked guid reached the gateway"  # 1: in flight
    st = job_state(stack, str(campaign["request_id"]))
    assert st is not None and st[1].get("pending", 0) + st[1].get("waiting_retry", 0) > 0  # held, not drained

    # Back online (by callback; the gateway accepts again). A late "kicked" from before is ignored.
    gateway(stack, "/_admin/config", "PUT", {"fail_guids": {}})
    now = datetime.now(UTC)
    callback(stack, guid, "online", now)
    callback(stack, guid, "kicked", now - timedelta(minutes=5))
    for rid in (campaign["request_id"], extra["request_id"]):
        wait_for(lambda rid=rid: (s := job_state(stack, str(rid))) and s[0] == "completed" and s, 120,
                 f"job {rid} to complete after the guid came back")

    sends = sends_for(stack, guid)
    keys = [s["idempotencyKey"] for s in sends]
    assert len(keys) == len(set(keys)) == 43, "every item delivered exactly once"
    assert db(stack, "SELECT state::text, source FROM guid_states WHERE guid = %s", guid) == [("online", "callback")]
    history = db(stack, "SELECT previous::text, state::text, source FROM guid_state_history WHERE guid = %s "
                        "ORDER BY id", guid)
    assert history == [(None, "kicked", "send_failure"), ("kicked", "online", "callback")]
    wait_for(lambda: guids_in(stack, "kicked") == 0, 30, "the kicked gauge to clear")
