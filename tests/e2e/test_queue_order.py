"""A guid's order holds at depth, through Kafka and separate processes: a ticket notification
published behind a 2,000-item campaign on its guid goes out within a few sends, and so does
a small later campaign (fair share), while the first one is still running."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from pacer_dev.stack import Stack
from tests.e2e.helpers import publish, request, sends_for
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.e2e


def _cancel(stack: Stack, request_id: str) -> None:
    with psycopg.connect(stack.infra.database_url) as conn:
        (job,) = conn.execute("SELECT job_id FROM jobs WHERE request_id = %s", (request_id,)).fetchone()
        conn.execute("SELECT pacer_job_action(%s, 'cancel', 'test', 'e2e: done with it')", (job,))


def _campaign_on(guid: str, n: int) -> dict[str, object]:
    body = request(n, 1)
    body["targets"]["items"] = [
        {"guid": guid, "to_id": f"room-{i}", "vars": {"n": str(i), "rid": "c"}} for i in range(n)]
    return body


def _slow(stack: Stack, guid: str) -> None:
    with psycopg.connect(stack.infra.database_url) as conn:
        conn.execute("INSERT INTO guid_limits (guid, limits, updated_by) VALUES (%s, %s, 'test')",
                     (guid, json.dumps({"min_interval_s": 0.25, "jitter_s": 0.0, "online_reserve": 0.2})))


def test_a_ticket_behind_a_two_thousand_item_campaign_goes_out_within_a_few_sends(stack: Stack) -> None:
    guid = f"deep-{uuid.uuid4().hex[:6]}"
    _slow(stack, guid)
    campaign = _campaign_on(guid, 2000)
    publish(stack, json.dumps(campaign).encode())
    wait_for(lambda: len(sends_for(stack, guid)) >= 3, 90, "the campaign to start")
    ticket = {"request_id": f"ticket-{uuid.uuid4().hex[:8]}", "kind": "ticket_notify", "created_by": "crm",
              "business_id": f"T-{uuid.uuid4().hex[:6]}", "status_version": 1,
              "message": {"type": "text", "content": "Your ticket was answered"},
              "targets": {"mode": "snapshot", "items": [{"guid": guid, "to_id": "customer-7"}]}}
    before = len(sends_for(stack, guid))
    publish(stack, json.dumps(ticket).encode())
    sends = wait_for(lambda: (s := sends_for(stack, guid)) and any(x["toId"] == "customer-7" for x in s) and s,
                     60, "the ticket notification")
    position = next(i for i, x in enumerate(sends) if x["toId"] == "customer-7")
    with psycopg.connect(stack.infra.database_url) as conn:  # tickets are held for the coalescing window
        (due,) = conn.execute("SELECT extract(epoch FROM i.not_before) FROM items i JOIN jobs j USING (job_id)"
                              " WHERE j.request_id = %s", (ticket["request_id"],)).fetchone()
    before = max(before, sum(1 for x in sends[:position] if x["at"] < float(due or 0)))

    small = _campaign_on(guid, 3)
    small["targets"]["items"] = [{"guid": guid, "to_id": f"late-{i}"} for i in range(3)]
    small["message"] = {"type": "text", "content": "a later campaign"}
    before_small = len(sends_for(stack, guid))
    publish(stack, json.dumps(small).encode())
    sends_after = wait_for(lambda: (s := sends_for(stack, guid)) and sum(x["toId"].startswith("late-") for x in s) == 3
                           and s, 60, "the later campaign")
    last_small = max(i for i, x in enumerate(sends_after) if x["toId"].startswith("late-"))
    _cancel(stack, campaign["request_id"])  # type: ignore[arg-type]  # the request id the test built is a str
    assert position - before <= 3, f"the ticket waited behind {position - before} campaign sends once due"
    assert last_small - before_small <= 3 * 2 + 3, "the later campaign took turns with the first, not after it"
    assert len(sends_after) < 2000, "the first campaign was still running"
